"""``find_docker_login``: a registry login from the Docker config, found as the docker CLI finds
it (``credHelpers``, ``credsStore``, ``auths``), the config read the docker SDK's way.

A credential helper is run here, within a timeout and an output bound, asked for one registry
only; every failure is a ``RegistryCredentialsError`` or ``CredentialHelperError`` naming the
file or the helper and the registry, and never shows what a helper printed on success.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import CredentialHelperError, RegistryCredentialsError
from images.engine.port import Credentials

HELPER_PREFIX = "docker-credential-"
HELPER_OUTPUT_LIMIT = 1 << 20  # a helper's answer is a few hundred bytes of JSON
_HELPER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_NOT_FOUND = "credentials not found"  # docker-credential-helpers' ErrCredentialsNotFound
_LOGIN_KEYS = (("auths", dict), ("credHelpers", dict), ("credsStore", str))


def find_docker_login(
    registry: str, *, config_file: Path, env: Mapping[str, str], timeout: float
) -> Credentials | None:
    """The login the Docker config ``config_file`` holds for ``registry`` (a host,
    ``docker.io`` for Docker Hub), found as the docker CLI finds it; None when it holds none.

    The docker SDK reads the config and says which credential helper serves the registry
    (``credHelpers`` for that host, else ``credsStore``); a helper without a login for it, and
    a config without helpers, leave the ``auths`` entries, matched by the SDK. The helper is run
    here (with ``env``), not through the SDK's ``credentials.Store``, which waits for it
    without a timeout, reads all it prints, and puts its output (maybe the secret) in its error
    message."""
    import docker.auth
    import docker.errors

    if not config_file.is_file():
        return None
    logins = _login_keys(config_file)
    if not logins:
        return None
    try:
        config = docker.auth.load_config(config_dict=dict(logins))  # it pops the keys
    except (docker.errors.DockerException, ValueError, TypeError):
        raise _unusable_auths(config_file, logins.get("auths", {})) from None
    store = config.get_credential_store(registry)
    if store:
        key = docker.auth.INDEX_URL if registry == docker.auth.INDEX_NAME else registry
        where = "credHelpers" if config.cred_helpers.get(key) else "credsStore"
        login = _helper_login(
            str(store), registry, where=f"the {where} of {config_file}", env=env, timeout=timeout
        )
        if login is not None:
            return login
    # the auths entries, matched as the SDK matches them (https://HOST/v1/ is HOST)
    entry = docker.auth.AuthConfig({"auths": config.auths}).resolve_authconfig(registry)
    if not entry:
        return None
    if entry.get("IdentityToken"):
        raise _identity_token(registry, str(config_file))
    user, password = entry.get("username"), entry.get("password")
    if isinstance(user, str) and isinstance(password, str) and user:
        return Credentials(username=user, password=password, source=str(config_file))
    return None


def _login_keys(config_file: Path) -> dict[str, Any]:
    """The non-empty login keys of the Docker config file (``auths``, ``credHelpers``,
    ``credsStore``), each checked to be of its kind; refused when the file is not usable."""
    try:
        doc = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryCredentialsError(f"{config_file}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RegistryCredentialsError(
            f"{config_file}: not valid JSON: {exc.msg} (line {exc.lineno})"
        ) from None
    if not isinstance(doc, dict):
        raise RegistryCredentialsError(f"{config_file}: not a JSON object")
    for key, kind in _LOGIN_KEYS:
        if key in doc and not isinstance(doc[key], kind):
            what = "an object" if kind is dict else "a string"
            raise RegistryCredentialsError(f"{config_file}: {key!r} must be {what}")
    # only the login keys: the SDK reads a dict without them as a legacy file of auths alone,
    # and an empty one as "find the config yourself"
    return {key: doc[key] for key, _ in _LOGIN_KEYS if doc.get(key)}


def _unusable_auths(config_file: Path, auths: Mapping[str, Any]) -> RegistryCredentialsError:
    """The error naming the first ``auths`` entry the SDK cannot read."""
    import docker.auth
    import docker.errors

    for key, entry in auths.items():
        try:
            docker.auth.parse_auth({key: entry}, raise_on_error=True)
        except (docker.errors.DockerException, ValueError, TypeError):  # binascii.Error too
            return RegistryCredentialsError(
                f"{config_file}: auths.{key} is not an object whose auth is base64 of "
                "USER:PASSWORD",
                hint=f"run `docker login {key}` again, or fix the file",
            )
    return RegistryCredentialsError(f"{config_file}: the auths are not usable")


def _helper_login(
    name: str, registry: str, *, where: str, env: Mapping[str, str], timeout: float
) -> Credentials | None:
    """``docker-credential-NAME get`` for ``registry`` (the docker-credential-helpers
    protocol: the server on stdin, ``{"Username": ..., "Secret": ...}`` on stdout); None when
    the helper has no login for it."""
    import docker.auth

    program = HELPER_PREFIX + name
    about = f"the credential helper {program} ({where}) for the registry {registry}"
    retry = f"try it yourself: `echo {registry} | {program} get`"
    if not _HELPER_NAME_RE.fullmatch(name):
        raise CredentialHelperError(
            f"{where} names the credential helper {name!r}, which is not a helper name",
            hint="a helper is named like desktop, ecr-login or gcloud (docker-credential-NAME)",
        )
    exe = shutil.which(program, path=env.get("PATH", os.defpath))
    if exe is None:
        raise CredentialHelperError(
            f"{about} is not installed: no {program} on PATH",
            hint=f"install {program}, or take {name!r} out of {where}; "
            "or set BUILD_IMAGE_REGISTRY_USER, BUILD_IMAGE_REGISTRY_PASSWORD and "
            "BUILD_IMAGE_REGISTRY_HOST, which win over the Docker config",
        )
    # Docker Hub's logins are stored under the v1 index URL, as the docker CLI stores them
    server = docker.auth.INDEX_URL if registry == docker.auth.INDEX_NAME else registry
    ran = _run_bounded([exe, "get"], server.encode(), env=env, timeout=timeout)
    if ran.timed_out:
        raise CredentialHelperError(
            f"{about} did not answer within {timeout:g}s",
            hint=f"it may wait for a keychain or a browser login; {retry} (--timeout bounds it)",
        )
    if ran.too_large:
        raise CredentialHelperError(
            f"{about} printed more than {HELPER_OUTPUT_LIMIT} bytes",
            hint=f"what it printed is not shown; {retry}",
        )
    if ran.returncode != 0:
        said = _first_line(ran.stdout) or _first_line(ran.stderr)
        if _NOT_FOUND in said.lower():
            return None
        raise CredentialHelperError(
            f"{about} failed (exit status {ran.returncode}" + (f": {said})" if said else ")"),
            hint=f"{retry}; it may need a login first (`docker login {registry}`)",
        )
    answer: object = None
    with contextlib.suppress(ValueError):
        answer = json.loads(ran.stdout.decode("utf-8"))
    user = answer.get("Username") if isinstance(answer, dict) else None
    secret = answer.get("Secret") if isinstance(answer, dict) else None
    if not (isinstance(user, str) and isinstance(secret, str)):
        raise CredentialHelperError(
            f"{about} answered with something that is not a login (the JSON object "
            '{"Username": ..., "Secret": ...} of the credential helper protocol)',
            hint=f"what it printed is not shown, as it may hold a secret; {retry}",
        )
    if not user and not secret:  # docker-credential-pass answers so for an unknown server
        return None
    if user == docker.auth.TOKEN_USERNAME:
        raise _identity_token(registry, program)
    return Credentials(username=user, password=secret, source=f"{program}, {where}")


def _identity_token(registry: str, source: str) -> CredentialHelperError:
    return CredentialHelperError(
        f"{source} holds an identity token (an OAuth2 refresh token) for the registry "
        f"{registry}; this tool logs in with a user and a password or token only",
        hint="set BUILD_IMAGE_REGISTRY_USER, BUILD_IMAGE_REGISTRY_PASSWORD and "
        f"BUILD_IMAGE_REGISTRY_HOST={registry} (a user and an access token)",
    )


@dataclass(frozen=True, kw_only=True)
class _Ran:
    returncode: int | None
    stdout: bytes = field(repr=False)
    stderr: bytes = field(repr=False)
    timed_out: bool = False
    too_large: bool = False


def _run_bounded(
    argv: Sequence[str], stdin: bytes, *, env: Mapping[str, str], timeout: float
) -> _Ran:
    """Run ``argv`` with ``stdin``, reading at most ``HELPER_OUTPUT_LIMIT`` bytes of each of
    its outputs for at most ``timeout`` seconds; past either, its process group is killed (a
    shell script's children too, which would keep the pipes open)."""
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        return _Ran(returncode=127, stdout=b"", stderr=str(exc).encode())
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    with contextlib.suppress(OSError):  # a helper that does not read its input
        proc.stdin.write(stdin)
    with contextlib.suppress(OSError):
        proc.stdin.close()
    fd_out, fd_err = proc.stdout.fileno(), proc.stderr.fileno()
    out = {fd_out: bytearray(), fd_err: bytearray()}
    end = time.monotonic() + timeout
    timed_out = too_large = False
    with selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map() and not too_large:
            left = end - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                out[key.fd] += chunk
                too_large = too_large or len(out[key.fd]) > HELPER_OUTPUT_LIMIT
    if not (timed_out or too_large):
        try:
            proc.wait(timeout=max(end - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:  # closed its outputs, then went on
            timed_out = True
    if timed_out or too_large:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return _Ran(
        returncode=proc.returncode,
        stdout=bytes(out[fd_out]),
        stderr=bytes(out[fd_err]),
        timed_out=timed_out,
        too_large=too_large,
    )


def _first_line(data: bytes) -> str:
    """The first line of a helper's complaint, printable and at most 200 characters."""
    line = data.decode("utf-8", "replace").strip().split("\n", 1)[0].strip()
    line = "".join(c if c.isprintable() else "?" for c in line)
    return line if len(line) <= 200 else line[:200] + "..."
