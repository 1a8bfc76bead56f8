"""``Skopeo``: copies OCI image layouts to and from registries, bytes unchanged.

The image a build normalizes (``images.oci``) is published as it is: ``skopeo copy
--preserve-digests oci:LAYOUT:TAG docker://REPO:TAG`` uploads its blobs and its manifest
without recompressing anything, so the digest the tool computed is the digest the registry
serves (``docker push`` would recompress the layers). The reverse copy reads a published image
into a layout, for a file-level comparison.

Credentials go to skopeo in an auth file of a private temporary directory (mode 0600), never on
its command line, and are removed when the copy ends; every message has them redacted.
Plain http is used for loopback registries only, as the registry client does
(``images.publish.registry``). Proxies and the trust store: skopeo reads ``HTTPS_PROXY``,
``NO_PROXY`` and ``SSL_CERT_FILE``/``SSL_CERT_DIR`` as pip does; the command's ``--proxy`` and
``--cert`` are passed to it that way.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from core.digests import is_digest
from core.errors import PushError, RegistryError
from core.network import NetworkConfig, tool_environment
from images.engine.docker_sdk import redact
from images.engine.port import BaseImageFetcher, ImageCopier, PushCredentials, RegistryTarget

SKOPEO = "skopeo"
SKOPEO_HINT = "install skopeo (Debian: apt-get install skopeo), version 1.9 or later"


class Skopeo(ImageCopier, BaseImageFetcher):
    """skopeo on PATH (or ``binary``), run with the environment ``env`` plus the network
    settings, each copy bounded by ``timeout`` seconds."""

    def __init__(
        self,
        *,
        env: Mapping[str, str],
        network: NetworkConfig,
        timeout: float = 3600.0,
        binary: str = SKOPEO,
    ) -> None:
        found = shutil.which(binary, path=env.get("PATH", os.defpath))
        if found is None:
            raise PushError(f"{binary} is not on PATH", hint=SKOPEO_HINT)
        self._binary = found
        self._env = tool_environment(env, network)
        self._proxy_secrets = tuple(
            part for proxy in network.proxies.values() for part in (proxy.credentials or ())
        )
        self._timeout = timeout

    def push_layout(
        self,
        layout: Path,
        tag: str,
        dest: RegistryTarget,
        credentials: PushCredentials | None,
    ) -> str:
        """Copy the image ``tag`` of ``layout`` to ``dest`` with its digests preserved; the
        manifest digest skopeo wrote."""
        with _auth_dir(dest.registry, credentials) as private:
            digestfile = private / "digest"
            argv = [
                self._binary,
                "copy",
                "--quiet",
                "--preserve-digests",
                "--digestfile",
                str(digestfile),
                f"--dest-tls-verify={'false' if dest.plain_http else 'true'}",
                *(["--dest-authfile", str(private / "auth.json")] if credentials else []),
                f"oci:{_colon_free(layout, private)}:{tag}",
                f"docker://{dest.reference}",
            ]
            self._run(argv, f"skopeo copy to {dest.reference}", credentials)
            digest = digestfile.read_text(encoding="utf-8").strip()
        if not is_digest(digest):
            raise PushError(f"skopeo copy to {dest.reference} wrote no manifest digest")
        return digest

    def pull_layout(
        self,
        source: RegistryTarget,
        layout: Path,
        tag: str,
        credentials: PushCredentials | None,
    ) -> None:
        """Copy the image ``source`` into ``layout`` as ``tag``, its blobs unchanged."""
        with _auth_dir(source.registry, credentials) as private:
            argv = [
                self._binary,
                "copy",
                "--quiet",
                "--preserve-digests",
                f"--src-tls-verify={'false' if source.plain_http else 'true'}",
                *(["--src-authfile", str(private / "auth.json")] if credentials else []),
                f"docker://{source.reference}",
                f"oci:{_colon_free(layout, private)}:{tag}",
            ]
            self._run(argv, f"skopeo copy from {source.reference}", credentials)

    def copy_to_dir(self, source: RegistryTarget, directory: Path) -> None:
        """Copy the image ``source`` into ``directory`` as ``dir:`` writes it: the manifest
        as the registry serves it, each blob under its hex digest, nothing converted. The
        credentials are skopeo's own (its auth file, else the Docker config), as the daemon
        that pulled the base used them."""
        argv = [
            self._binary,
            "copy",
            "--quiet",
            f"--src-tls-verify={'false' if source.plain_http else 'true'}",
            f"docker://{source.reference}",
            f"dir:{directory}",
        ]
        self._run(argv, f"skopeo copy from {source.reference}", None)

    def raw_manifest(self, source: RegistryTarget) -> bytes:
        """The manifest (or index) ``source`` names, as its registry serves it
        (``skopeo inspect --raw``): its sha256 is the digest that pins it. The credentials are
        skopeo's own, as for ``copy_to_dir``."""
        argv = [
            self._binary,
            "inspect",
            "--raw",
            f"--tls-verify={'false' if source.plain_http else 'true'}",
            f"docker://{source.reference}",
        ]
        return self._run(argv, f"skopeo inspect {source.reference}", None)

    def _run(self, argv: list[str], what: str, credentials: PushCredentials | None) -> bytes:
        """Run skopeo; its standard output."""
        secrets = (*(credentials.secrets() if credentials else ()), *self._proxy_secrets)
        try:
            done = subprocess.run(
                argv,
                env=self._env,
                capture_output=True,
                timeout=self._timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RegistryError(
                f"{what}: no answer within {self._timeout:.0f} s",
                hint="check the registry and the proxy, then publish again",
            ) from None
        except OSError as exc:
            raise PushError(
                f"{what}: cannot run skopeo: {exc.strerror}", hint=SKOPEO_HINT
            ) from None
        if done.returncode != 0:
            stderr = done.stderr.decode("utf-8", errors="replace")
            tail = redact(stderr.strip()[-1500:], secrets)
            raise RegistryError(
                f"{what} failed (exit {done.returncode}): {tail}",
                hint="check the registry's address and credentials (docker login, or "
                "REGISTRY_USERNAME/REGISTRY_PASSWORD), then run the command again",
            )
        return done.stdout


@contextmanager
def _auth_dir(registry: str, credentials: PushCredentials | None) -> Iterator[Path]:
    """A private directory (0700) for one copy, holding ``auth.json`` (0600) when there are
    credentials; removed afterwards."""
    private = Path(tempfile.mkdtemp(prefix="build-image-skopeo-"))
    try:
        if credentials is not None:
            token = base64.b64encode(
                f"{credentials.username}:{credentials.password}".encode()
            ).decode("ascii")
            auth = private / "auth.json"
            fd = os.open(auth, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"auths": {registry: {"auth": token}}}, fh)
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _colon_free(layout: Path, private: Path) -> Path:
    """``layout``, or a link to it in ``private`` when its path has a colon (skopeo reads
    ``oci:PATH:TAG`` up to the first colon)."""
    if ":" not in str(layout):
        return layout
    layout.mkdir(parents=True, exist_ok=True)
    link = private / "layout"
    link.symlink_to(layout.resolve(), target_is_directory=True)
    return link
