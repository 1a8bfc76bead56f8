"""``Skopeo``: the one registry client; no HTTP of the tool's own goes to a registry.

- ``push_layout``: ``skopeo copy --preserve-digests oci:LAYOUT:TAG docker://REPO:TAG`` uploads
  the blobs and the manifest without recompressing anything, so the digest the build computed is
  the digest the registry serves (``docker push`` would recompress the layers); its ``--debug``
  log says which blobs it uploaded and which it mounted from another repository of the registry
  (the base image's, once skopeo's blob-info cache has seen them there);
- ``lookup``: a manifest or index as its registry serves it (``skopeo inspect --raw``), whose
  sha256 is the digest that pins it; ``retag``: a tag re-pointed to a digest of its repository.

Credentials (``find_credentials``) go to skopeo in an auth file (0600) of a private temporary
directory, never on its command line; without them skopeo reads the Docker config itself. Every
message has them redacted. Plain http for loopback registries only; ``--proxy`` and ``--cert``
reach skopeo as ``HTTPS_PROXY``/``NO_PROXY`` and ``SSL_CERT_FILE``/``SSL_CERT_DIR``. A copy of a
layout is bounded by ``COPY_TIMEOUT``, every other call by ``--timeout`` per attempt
(``--retries`` + 1 of them), and all of them by what is left of ``--deadline``. A failure is
read from skopeo's error line and said as the registry, the reference, the status and a hint.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl

from core.digests import is_digest
from core.errors import (
    BuildImageError,
    DeadlineError,
    PushError,
    RegistryAuthError,
    RegistryCredentialsError,
    RegistryError,
    RegistryUnreachableError,
)
from core.network import DEFAULT_OPTIONS, NetworkOptions, tool_environment
from images.engine.docker_login import find_docker_login
from images.engine.docker_sdk import redact
from images.engine.port import BaseImageFetcher, Credentials, RegistryTarget

SKOPEO = "skopeo"
SKOPEO_HINT = "install skopeo (Debian: apt-get install skopeo), version 1.9 or later"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, "application/vnd.docker.distribution.manifest.list.v2+json")
COPY_TIMEOUT = 3600.0  # seconds a copy of a layout may take

ENV_USER = "BUILD_IMAGE_REGISTRY_USER"
ENV_PASSWORD = "BUILD_IMAGE_REGISTRY_PASSWORD"  # noqa: S105 - the variable's name, not a secret
ENV_HOST = "BUILD_IMAGE_REGISTRY_HOST"  # the one registry the environment's credentials are for
LOGIN_HINT = (
    f"credentials come from {ENV_USER} and {ENV_PASSWORD} (for the host {ENV_HOST} names), "
    "else from the Docker config: its credential helper for the host (credHelpers, else "
    "credsStore), else its auths (`docker login REGISTRY`); never from the manifest"
)
_FATAL_RE = re.compile(r'level=fatal msg="((?:[^"\\]|\\.)*)"')
_PARSING_RE = re.compile(r'^Error parsing image name "[^"]*": ')
_UPLOADED_RE = re.compile(r"Upload of layer (sha256:[0-9a-f]{64}) complete")
_MOUNT_RE = re.compile(r"Trying to mount [^?\s]*\?([^\s\"]+)")
_NOT_FOUND = ("manifest unknown", "name unknown", "statuscode: 404", "404 not found")
_UNAUTHORIZED = ("unauthorized", "authentication required", "statuscode: 401")
_DENIED = ("denied", "statuscode: 403")
_NETWORK = ("connection refused", "no such host", "unreachable", "no route to host", "dial tcp")
_BUSY_RE = re.compile(r"toomanyrequests|too many requests|status(?:code)?:? *(?:429|5\d\d)\b")
_TLS = ("x509", "certificate", "tls:", "http response to https client")


# ------------------------------------------------------------------------------ credentials


def default_docker_config(env: Mapping[str, str], home: Path) -> Path:
    config_dir = env.get("DOCKER_CONFIG")
    return (Path(config_dir) if config_dir else home / ".docker") / "config.json"


def find_credentials(
    registry: str,
    *,
    env: Mapping[str, str],
    docker_config: Path | None,
    timeout: float = 30.0,  # seconds a credential helper may take (--timeout)
) -> Credentials | None:
    """The credentials for ``registry``, in this order (None means anonymous):

    1. ``BUILD_IMAGE_REGISTRY_USER``/``_PASSWORD``, for the registry named by
       ``BUILD_IMAGE_REGISTRY_HOST`` only (a `pin REF` of another host never gets them);
    2. the Docker config as the docker CLI reads it
       (``images.engine.docker_login.find_docker_login``):
       the credential helper of ``credHelpers`` for this host, else of ``credsStore``
       (``docker-credential-NAME``, run for at most ``timeout`` seconds and asked for this
       host only), then the ``auths`` entry of this host."""
    user, password = env.get(ENV_USER), env.get(ENV_PASSWORD)
    if user or password:
        if not (user and password):
            raise RegistryCredentialsError(
                f"only one of {ENV_USER} and {ENV_PASSWORD} is set", hint="set both, or neither"
            )
        host = env.get(ENV_HOST, "").strip()
        if not host:
            raise RegistryCredentialsError(
                f"{ENV_USER}/{ENV_PASSWORD} are set but {ENV_HOST} is not",
                hint=f"set {ENV_HOST} to the registry they are for (e.g. registry.mthreads.com); "
                "they are never sent to any other host",
            )
        if host == registry:
            return Credentials(
                username=user, password=password, source=f"{ENV_USER}/{ENV_PASSWORD}"
            )
    if docker_config is None:
        return None
    return find_docker_login(registry, config_file=docker_config, env=env, timeout=timeout)


# ------------------------------------------------------------------------------ what skopeo says


@dataclass(frozen=True, kw_only=True)
class PlatformManifest:
    digest: str
    platform: str  # "linux/amd64", "linux/arm64/v8", "unknown/unknown" (attestations)


@dataclass(frozen=True, kw_only=True)
class ManifestInfo:
    digest: str
    media_type: str
    platforms: tuple[PlatformManifest, ...] = ()  # for an index

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES


def parse_manifest_info(raw: bytes, reference: str) -> ManifestInfo:
    """A manifest or index as its registry serves it for ``reference``: its digest is the
    sha256 of the bytes (checked against a digest reference), its media type the one it
    states (else the OCI type its shape says)."""
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    _, at, pinned = reference.rpartition("@")
    if at and is_digest(pinned) and pinned != digest:
        raise RegistryError(
            f"{reference}: the registry sent a manifest whose sha256 is {digest}",
            hint="the registry or a proxy in between alters manifests; do not trust it",
        )
    doc = json.loads(raw)
    media_type = str(doc.get("mediaType") or (OCI_INDEX if "manifests" in doc else OCI_MANIFEST))
    platforms = []
    for m in doc.get("manifests", []) if media_type in INDEX_TYPES else []:
        p = m.get("platform") or {}
        parts = [p.get("os", "unknown"), p.get("architecture", "unknown")]
        if p.get("variant"):
            parts.append(p["variant"])
        platforms.append(PlatformManifest(digest=m["digest"], platform="/".join(parts)))
    return ManifestInfo(digest=digest, media_type=media_type, platforms=tuple(platforms))


@dataclass(frozen=True, kw_only=True)
class CopyReport:
    """What one copy to a registry did: the manifest digest it wrote, the blobs it uploaded,
    and the blobs it mounted from another repository of the registry (digest -> repository);
    every other blob the destination had already."""

    digest: str
    uploaded: frozenset[str] = frozenset()
    mounted: Mapping[str, str] = field(default_factory=dict)


def parse_copy_log(digest: str, log: str) -> CopyReport:
    """The ``CopyReport`` of a ``skopeo --debug copy`` from its log: "Upload of layer D
    complete" for each blob uploaded, "Trying to mount ...?from=REPO&mount=D" for each mount
    tried; a blob whose mount was tried and that was not uploaded was mounted (from the
    repository of its last try: skopeo stops at the first mount that works)."""
    uploaded = frozenset(_UPLOADED_RE.findall(log))
    tried: dict[str, str] = {}
    for query in _MOUNT_RE.findall(log):
        params = dict(parse_qsl(query))
        if is_digest(params.get("mount", "")) and params.get("from"):
            tried[params["mount"]] = params["from"]
    mounted = {d: repo for d, repo in tried.items() if d not in uploaded}
    return CopyReport(digest=digest, uploaded=uploaded, mounted=mounted)


def _reason(stderr: str) -> str:
    """skopeo's own account of a failure: its fatal line, without the image name it repeats."""
    found = _FATAL_RE.findall(stderr)
    if found:
        text = found[-1].replace('\\"', '"').replace("\\\\", "\\")
        return _PARSING_RE.sub("", text)
    lines = [x for x in stderr.strip().splitlines() if "level=debug" not in x]
    return lines[-1] if lines else "no message"


# ------------------------------------------------------------------------------ the client


class Skopeo(BaseImageFetcher):
    """skopeo on PATH (or ``binary``), run with the environment ``env`` plus ``options``'
    proxies and trust store; every call but a copy of a layout bounded by ``options.timeout``
    per attempt (``options.attempts`` of them), and every call by its deadline."""

    def __init__(
        self,
        *,
        env: Mapping[str, str],
        options: NetworkOptions = DEFAULT_OPTIONS,
        binary: str = SKOPEO,
    ) -> None:
        found = shutil.which(binary, path=env.get("PATH", os.defpath))
        if found is None:
            raise PushError(f"{binary} is not on PATH", hint=SKOPEO_HINT)
        self._binary = found
        self._env = tool_environment(env, options.network)
        self._proxy_secrets = tuple(
            part for proxy in options.network.proxies.values() for part in (proxy.credentials or ())
        )
        self._request_timeout = options.timeout
        self._retries = options.attempts - 1  # skopeo's --retry-times
        self._deadline = options.deadline

    # -- copies of a layout

    def push_layout(
        self, layout: Path, tag: str, dest: RegistryTarget, credentials: Credentials | None
    ) -> CopyReport:
        """Copy the image ``tag`` of ``layout`` to ``dest`` with its digests preserved: the
        manifest digest skopeo wrote, and what it uploaded and mounted (from its debug log)."""
        with _private(dest.registry, credentials) as (private, auth):
            digestfile = private / "digest"
            argv = [
                "--debug",
                "copy",
                "--quiet",
                "--preserve-digests",
                "--digestfile",
                str(digestfile),
                f"--dest-tls-verify={_verify(dest)}",
                *auth,
                f"oci:{_colon_free(layout, private)}:{tag}",
                f"docker://{dest.reference}",
            ]
            log = self._run(argv, f"skopeo copy to {dest.reference}", dest, credentials) or b""
            digest = digestfile.read_text(encoding="utf-8").strip()
        if not is_digest(digest):
            raise PushError(f"skopeo copy to {dest.reference} wrote no manifest digest")
        return parse_copy_log(digest, log.decode("utf-8", errors="replace"))

    def pull_layout(
        self, source: RegistryTarget, layout: Path, tag: str, credentials: Credentials | None
    ) -> None:
        """Copy the image ``source`` into ``layout`` as ``tag``, its blobs unchanged."""
        with _private(source.registry, credentials) as (private, auth):
            argv = [
                "copy",
                "--quiet",
                "--preserve-digests",
                f"--src-tls-verify={_verify(source)}",
                *auth,
                f"docker://{source.reference}",
                f"oci:{_colon_free(layout, private)}:{tag}",
            ]
            self._run(argv, f"skopeo copy from {source.reference}", source, credentials)

    # -- the base image (BaseImageFetcher): skopeo's own credentials

    def copy_to_dir(self, source: RegistryTarget, directory: Path) -> None:
        """Copy the image ``source`` into ``directory`` as ``dir:`` writes it: the manifest
        as the registry serves it, each blob under its hex digest, nothing converted. The
        credentials are skopeo's own (its auth file, else the Docker config), as the daemon
        that pulled the base used them."""
        argv = [
            "copy",
            "--quiet",
            f"--src-tls-verify={_verify(source)}",
            f"docker://{source.reference}",
            f"dir:{directory}",
        ]
        self._run(argv, f"skopeo copy from {source.reference}", source, None)

    def raw_manifest(self, source: RegistryTarget) -> bytes:
        """The manifest (or index) ``source`` names, as its registry serves it
        (``skopeo inspect --raw``): its sha256 is the digest that pins it. The credentials are
        skopeo's own, as for ``copy_to_dir``."""
        raw = self._inspect(source, None, absent=False)
        assert raw is not None
        return raw

    # -- manifests

    def lookup(
        self, source: RegistryTarget, credentials: Credentials | None
    ) -> ManifestInfo | None:
        """The manifest ``source`` (a tag or a digest) names now; None when there is none."""
        raw = self._inspect(source, credentials, absent=True)
        return None if raw is None else parse_manifest_info(raw, source.reference)

    def retag(
        self, source: RegistryTarget, dest: RegistryTarget, credentials: Credentials | None
    ) -> None:
        """Point the tag ``dest`` at the manifest ``source`` (a digest in the same repository,
        an index with all its manifests), bytes unchanged."""
        with _private(dest.registry, credentials) as (_, auth):
            argv = [
                "copy",
                "--quiet",
                "--all",
                "--preserve-digests",
                f"--retry-times={self._retries}",
                f"--src-tls-verify={_verify(source)}",
                f"--dest-tls-verify={_verify(dest)}",
                *auth,
                f"docker://{source.reference}",
                f"docker://{dest.reference}",
            ]
            self._run(argv, f"skopeo copy to {dest.reference}", dest, credentials, query=True)

    def _inspect(
        self, source: RegistryTarget, credentials: Credentials | None, *, absent: bool
    ) -> bytes | None:
        with _private(source.registry, credentials) as (_, auth):
            argv = [
                "inspect",
                "--raw",
                f"--retry-times={self._retries}",
                f"--tls-verify={_verify(source)}",
                *auth,
                f"docker://{source.reference}",
            ]
            what = f"skopeo inspect {source.reference}"
            return self._run(argv, what, source, credentials, query=True, absent=absent)

    # -- running skopeo

    def _run(
        self,
        argv: list[str],
        what: str,
        target: RegistryTarget,
        credentials: Credentials | None,
        *,
        query: bool = False,
        absent: bool = False,
    ) -> bytes | None:
        """Run skopeo; its standard output (with ``--debug``, its log); None when ``absent``
        and the registry has no such manifest. A ``query`` (an inspect, a re-point) is bounded
        by the request timeout of each attempt, a copy by ``COPY_TIMEOUT``; both by what is
        left of the deadline."""
        timeout = self._request_timeout * (self._retries + 1) if query else COPY_TIMEOUT
        deadline = self._deadline
        if deadline is not None:
            left = deadline.left()
            timeout = timeout if left is None else min(timeout, left)
            watch = deadline.begin("skopeo", f"docker://{target.reference}")
        try:
            done = subprocess.run(
                [self._binary, *argv],
                env=self._env,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise self._timed_out(what, target, timeout, query=query) from None
        except OSError as exc:
            raise PushError(
                f"{what}: cannot run skopeo: {exc.strerror}", hint=SKOPEO_HINT
            ) from None
        finally:
            if deadline is not None:
                deadline.end(watch)
        if done.returncode == 0:
            return done.stderr if argv[0] == "--debug" else done.stdout
        secrets = (*(credentials.secrets() if credentials else ()), *self._proxy_secrets)
        reason = redact(_reason(done.stderr.decode("utf-8", errors="replace")), secrets)
        if absent and any(s in reason.lower() for s in _NOT_FOUND):
            return None
        raise self._failure(what, target, reason, credentials, done.returncode)

    def _timed_out(
        self, what: str, target: RegistryTarget, timeout: float, *, query: bool
    ) -> BuildImageError:
        left = self._deadline.left() if self._deadline is not None else None
        if self._deadline is not None and left is not None and left <= 0.5:
            cut = self._deadline.error("skopeo", f"docker://{target.reference}")
            return DeadlineError(f"the registry {target.registry}: {cut.message}", hint=cut.hint)
        if not query:
            return RegistryError(
                f"{what}: no answer within {timeout:.0f} s",
                hint="check the registry and the proxy, then publish again",
            )
        return RegistryUnreachableError(
            f"the registry {target.registry} did not answer within {timeout:g}s "
            f"({target.reference}, {self._attempts()})",
            hint="retry, or raise --timeout",
        )

    def _attempts(self) -> str:
        n = self._retries + 1  # the attempts
        return f"{n} attempt{'s' if n != 1 else ''}"

    def _failure(
        self,
        what: str,
        target: RegistryTarget,
        reason: str,
        credentials: Credentials | None,
        code: int,
    ) -> BuildImageError:
        """The error skopeo's ``reason`` means, naming the registry and the reference."""
        low, registry = reason.lower(), target.registry
        who = "anonymously"
        if credentials is not None:
            who = f"as user {credentials.username!r} (from {credentials.source})"
        if any(s in low for s in _UNAUTHORIZED):
            if credentials is None:
                return RegistryAuthError(
                    f"the registry {registry} requires a login and no credentials were found "
                    "for it",
                    hint=LOGIN_HINT,
                )
            return RegistryAuthError(
                f"the registry {registry} refused the credentials of user "
                f"{credentials.username!r} (from {credentials.source}): HTTP 401",
                hint="check the user and password; " + LOGIN_HINT,
            )
        if any(s in low for s in _DENIED):
            return RegistryAuthError(
                f"the registry {registry} denies {target.reference} {who} (HTTP 403)",
                hint="the account needs pull (and, to publish, push) rights on the repository",
            )
        if any(s in low for s in _TLS):
            return RegistryError(
                f"{what}: {reason}",
                hint="the registry's certificate is not trusted here: pass its CA with --cert "
                "(or SSL_CERT_FILE), or check the address",
            )
        if any(s in low for s in _NETWORK):
            scheme = "http" if target.plain_http else "https"
            said = next((s for s in _NETWORK[:2] if s in low), "connection failed")
            return RegistryUnreachableError(
                f"cannot reach the registry {registry} at {scheme}://{registry} "
                f"({said}, {self._attempts()})",
                hint="is the registry running and the repository right? (image.repository in "
                "the manifest, or --repository)",
            )
        if _BUSY_RE.search(low):
            return RegistryUnreachableError(
                f"the registry {registry}: {what} failed after {self._attempts()} ({reason})",
                hint="it answered 429 (too many requests) or a server error each time; retry "
                f"later, or raise --retries (now {self._retries})",
            )
        return RegistryError(
            f"{what} failed (exit {code}): {reason}",
            hint="check the registry's address and the credentials for it, then run the "
            "command again",
        )


def _verify(target: RegistryTarget) -> str:
    return "false" if target.plain_http else "true"


@contextmanager
def _private(registry: str, credentials: Credentials | None) -> Iterator[tuple[Path, list[str]]]:
    """A private directory (0700) for one call, and the ``--authfile`` of the ``auth.json``
    (0600) it holds when there are credentials; removed afterwards."""
    private = Path(tempfile.mkdtemp(prefix="build-image-skopeo-"))
    try:
        auth: list[str] = []
        if credentials is not None:
            fd = os.open(private / "auth.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"auths": {registry: {"auth": credentials.auth}}}, fh)
            auth = ["--authfile", str(private / "auth.json")]
        yield private, auth
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
