"""The registry as the publishing commands ask it, through skopeo: credentials from the
environment and the Docker config, loopback-only plain http, and a stand-in ``skopeo`` program
(written here) that answers as skopeo 1.9 does: the manifest, its error lines (not found,
unauthorized, denied, refused, busy, untrusted), and no answer at all (--timeout, --deadline).
No registry needed."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

import pytest

import build_image
from core.deadline import Deadline
from core.errors import (
    BuildImageError,
    DeadlineError,
    ManifestNotFoundError,
    RegistryAuthError,
    RegistryCredentialsError,
    RegistryError,
    RegistryUnreachableError,
)
from core.network import NetworkOptions, is_loopback
from images.builder.tags import parse_reference
from images.engine.port import Credentials, RegistryTarget
from images.engine.skopeo import Skopeo, find_credentials
from images.publish.registry import Registry
from tests.support.publishing import DIGEST, INDEX, INDEX_DIGEST, MANIFEST

REG = "registry.example"
REF = parse_reference(f"{REG}/team/app:nightly")


def _config(tmp_path: Path, auths: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"auths": auths}))
    return path


def test_docker_config_base64_auth(tmp_path: Path) -> None:
    token = base64.b64encode(b"alice:pa:ss").decode()
    path = _config(tmp_path, {"127.0.0.1:5001": {"auth": token}})
    creds = find_credentials("127.0.0.1:5001", env={}, docker_config=path)
    assert creds is not None
    assert (creds.username, creds.password, creds.source) == ("alice", "pa:ss", str(path))
    assert "pa:ss" not in repr(creds)
    assert find_credentials("127.0.0.1:5000", env={}, docker_config=path) is None


def test_environment_wins_over_docker_config(tmp_path: Path) -> None:
    path = _config(tmp_path, {"r.example": {"auth": base64.b64encode(b"a:b").decode()}})
    env = {
        "BUILD_IMAGE_REGISTRY_USER": "ci",
        "BUILD_IMAGE_REGISTRY_PASSWORD": "tok",
        "BUILD_IMAGE_REGISTRY_HOST": "r.example",
    }
    creds = find_credentials("r.example", env=env, docker_config=path)
    assert creds is not None
    assert (creds.username, creds.password) == ("ci", "tok")
    # another host never gets the environment's credentials
    assert find_credentials("other.example", env=env, docker_config=None) is None


def test_environment_credentials_need_their_host() -> None:
    env = {"BUILD_IMAGE_REGISTRY_USER": "ci", "BUILD_IMAGE_REGISTRY_PASSWORD": "tok"}
    with pytest.raises(RegistryCredentialsError) as exc:
        find_credentials("r.example", env=env, docker_config=None)
    assert exc.value.message == (
        "BUILD_IMAGE_REGISTRY_USER/BUILD_IMAGE_REGISTRY_PASSWORD are set but "
        "BUILD_IMAGE_REGISTRY_HOST is not"
    )


def test_half_set_environment_is_refused() -> None:
    with pytest.raises(RegistryCredentialsError) as exc:
        find_credentials("r", env={"BUILD_IMAGE_REGISTRY_USER": "ci"}, docker_config=None)
    assert exc.value.message == (
        "only one of BUILD_IMAGE_REGISTRY_USER and BUILD_IMAGE_REGISTRY_PASSWORD is set"
    )


def test_bad_base64_in_docker_config(tmp_path: Path) -> None:
    path = _config(tmp_path, {"r": {"auth": "%%%"}})
    with pytest.raises(RegistryCredentialsError) as exc:
        find_credentials("r", env={}, docker_config=path)
    assert exc.value.message == (
        f"{path}: auths.r is not an object whose auth is base64 of USER:PASSWORD"
    )
    assert exc.value.hint == "run `docker login r` again, or fix the file"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1:5000", True), ("localhost:5000", True), ("[::1]:5000", True),
     ("127.1.2.3", True), ("registry.mthreads.com", False), ("10.0.0.1:5000", False)],
)  # fmt: skip
def test_plain_http_only_for_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# ------------------------------------------------------------------------------ through skopeo


def fatal(message: str) -> str:
    """A line skopeo 1.9 ends a failure with."""
    escaped = message.replace('"', '\\"')
    return f'time="2026-12-05T05:57:42Z" level=fatal msg="{escaped}"\n'


def stand_in(tmp_path: Path, *, out: bytes = b"", err: str = "", sleep: float = 0) -> Path:
    """A ``skopeo`` that logs its arguments (and the auth file it was given) to calls.jsonl,
    sleeps ``sleep`` seconds, prints ``out`` and ``err``, and fails when ``err`` is given."""
    script = tmp_path / "skopeo"
    script.write_text(
        f"""#!{sys.executable}
import json, pathlib, sys, time
argv = sys.argv[1:]
auth = [pathlib.Path(argv[i + 1]).read_text() for i, a in enumerate(argv) if a == "--authfile"]
with open({str(tmp_path / "calls.jsonl")!r}, "a") as log:
    log.write(json.dumps({{"argv": argv, "auth": auth}}) + "\\n")
time.sleep({sleep})
sys.stdout.buffer.write({out!r})
sys.stderr.write({err!r})
sys.exit(1 if {err!r} else 0)
""",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


def calls(tmp_path: Path) -> list[dict[str, list[str]]]:
    lines = (tmp_path / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def registry(
    script: Path,
    credentials: Credentials | None = None,
    *,
    retries: int = 0,
    deadline: Deadline | None = None,
) -> Registry:
    options = NetworkOptions(timeout=1, attempts=retries + 1, deadline=deadline)
    skopeo = Skopeo(env={}, options=options, binary=str(script))
    answer = Registry(skopeo, env={}, docker_config=None, timeout=1)
    answer._credentials[REG] = credentials
    return answer


BOT = Credentials(
    username="bot",
    password="s3cret-pw",
    source="BUILD_IMAGE_REGISTRY_USER/BUILD_IMAGE_REGISTRY_PASSWORD",
)


def test_a_tag_is_its_manifest_digest_and_the_login_goes_in_a_file(tmp_path: Path) -> None:
    info = registry(stand_in(tmp_path, out=MANIFEST), BOT, retries=2).require(REF)
    assert (info.digest, info.is_index) == (DIGEST, False)
    [call] = calls(tmp_path)
    assert call["argv"][:4] == ["inspect", "--raw", "--retry-times=2", "--tls-verify=true"]
    assert call["argv"][-1] == f"docker://{REF}"
    assert "s3cret-pw" not in " ".join(call["argv"])
    token = base64.b64encode(b"bot:s3cret-pw").decode()
    assert json.loads(call["auth"][0]) == {"auths": {REG: {"auth": token}}}


def test_an_index_lists_its_platforms(tmp_path: Path) -> None:
    info = registry(stand_in(tmp_path, out=INDEX)).require(REF)
    assert (info.digest, info.is_index) == (INDEX_DIGEST, True)
    assert [p.platform for p in info.platforms] == ["linux/amd64", "linux/arm64/v8"]


def test_a_manifest_of_another_digest_is_refused(tmp_path: Path) -> None:
    pinned = parse_reference(f"{REG}/team/app@{INDEX_DIGEST}")
    with pytest.raises(RegistryError) as exc:
        registry(stand_in(tmp_path, out=MANIFEST)).lookup(pinned)
    assert exc.value.message == (f"{pinned}: the registry sent a manifest whose sha256 is {DIGEST}")


def test_a_missing_tag_is_none_and_required_it_is_refused(tmp_path: Path) -> None:
    err = fatal(
        f'Error parsing image name "docker://{REF}": reading manifest nightly in '
        f"{REG}/team/app: manifest unknown: manifest unknown"
    )
    client = registry(stand_in(tmp_path, err=err))
    assert client.lookup(REF) is None
    with pytest.raises(ManifestNotFoundError) as exc:
        client.require(REF)
    assert exc.value.message == f"{REF}: the registry has no such tag"
    assert exc.value.hint == (
        f"check the spelling (`skopeo list-tags --tls-verify=false docker://{REG}/team/app` "
        "lists the tags)"
    )


LOGIN_HINT = (
    "credentials come from BUILD_IMAGE_REGISTRY_USER and BUILD_IMAGE_REGISTRY_PASSWORD (for the "
    "host BUILD_IMAGE_REGISTRY_HOST names), else from the Docker config: its credential helper "
    "for the host (credHelpers, else credsStore), else its auths (`docker login REGISTRY`); "
    "never from the manifest"
)
UNAUTHORIZED = fatal(
    f'Error parsing image name "docker://{REF}": reading manifest nightly in '
    f"{REG}/team/app: unauthorized: authentication required"
)


@pytest.mark.parametrize(
    ("credentials", "message", "hint"),
    [
        (None, f"the registry {REG} requires a login and no credentials were found for it",
         LOGIN_HINT),
        (BOT, f"the registry {REG} refused the credentials of user 'bot' (from "
         "BUILD_IMAGE_REGISTRY_USER/BUILD_IMAGE_REGISTRY_PASSWORD): HTTP 401",
         "check the user and password; " + LOGIN_HINT),
    ],
)  # fmt: skip
def test_unauthorized(
    tmp_path: Path, credentials: Credentials | None, message: str, hint: str
) -> None:
    with pytest.raises(RegistryAuthError) as exc:
        registry(stand_in(tmp_path, err=UNAUTHORIZED), credentials).lookup(REF)
    assert (exc.value.message, exc.value.hint) == (message, hint)


@pytest.mark.parametrize(
    ("said", "error", "message", "hint"),
    [
        ("requested access to the resource is denied: denied", RegistryAuthError,
         f"the registry {REG} denies {REF} as user 'bot' (from BUILD_IMAGE_REGISTRY_USER/"
         "BUILD_IMAGE_REGISTRY_PASSWORD) (HTTP 403)",
         "the account needs pull (and, to publish, push) rights on the repository"),
        (f'pinging container registry {REG}: Get "https://{REG}/v2/": dial tcp 10.0.0.9:443: '
         "connect: connection refused", RegistryUnreachableError,
         f"cannot reach the registry {REG} at https://{REG} (connection refused, 3 attempts)",
         "is the registry running and the repository right? (image.repository in the "
         "manifest, or --repository)"),
        ("reading manifest nightly in registry.example/team/app: received unexpected HTTP "
         "status: 503 Service Unavailable", RegistryUnreachableError,
         f"the registry {REG}: skopeo inspect {REF} failed after 3 attempts (reading manifest "
         f"nightly in {REG}/team/app: received unexpected HTTP status: 503 Service Unavailable)",
         "it answered 429 (too many requests) or a server error each time; retry later, or "
         "raise --retries (now 2)"),
        (f'pinging container registry {REG}: Get "https://{REG}/v2/": x509: certificate '
         "signed by unknown authority", RegistryError,
         f'skopeo inspect {REF}: pinging container registry {REG}: Get "https://{REG}/v2/": '
         "x509: certificate signed by unknown authority",
         "the registry's certificate is not trusted here: pass its CA with --cert (or "
         "SSL_CERT_FILE), or check the address"),
        ("s3cret-pw is not a thing", RegistryError,
         f"skopeo inspect {REF} failed (exit 1): *** is not a thing",
         "check the registry's address and the credentials for it, then run the command "
         "again"),
    ],
)  # fmt: skip
def test_what_skopeo_says_is_named(
    tmp_path: Path, said: str, error: type[BuildImageError], message: str, hint: str
) -> None:
    client = registry(stand_in(tmp_path, err=fatal(said)), BOT, retries=2)
    with pytest.raises(BuildImageError) as exc:
        client.lookup(REF)
    assert type(exc.value) is error
    assert (exc.value.message, exc.value.hint) == (message, hint)


def test_a_registry_that_does_not_answer_is_cut_off(tmp_path: Path) -> None:
    with pytest.raises(RegistryUnreachableError) as exc:
        registry(stand_in(tmp_path, sleep=5), retries=1).lookup(REF)
    assert exc.value.message == (f"the registry {REG} did not answer within 2s ({REF}, 2 attempts)")
    assert exc.value.hint == "retry, or raise --timeout"


def test_the_deadline_bounds_every_call(tmp_path: Path) -> None:
    deadline = Deadline(0.5)
    client = registry(stand_in(tmp_path, sleep=5), retries=3, deadline=deadline)
    with pytest.raises(DeadlineError) as exc:
        client.lookup(REF)
    assert exc.value.message == (
        f"the registry {REG}: skopeo docker://{REF} did not finish within the network "
        "deadline of this command (--deadline 0.5)"
    )
    with pytest.raises(DeadlineError):  # spent: the next call is refused at once
        client.lookup(REF)
    assert len(calls(tmp_path)) == 1


def test_the_deadline_bounds_a_copy_too(tmp_path: Path) -> None:
    options = NetworkOptions(timeout=1, attempts=1, deadline=Deadline(0.5))
    skopeo = Skopeo(env={}, options=options, binary=str(stand_in(tmp_path, sleep=5)))
    source = RegistryTarget(registry=REG, reference=str(REF), plain_http=True)
    with pytest.raises(DeadlineError) as exc:
        skopeo.copy_to_dir(source, tmp_path / "base")
    assert exc.value.message == (
        f"the registry {REG}: skopeo docker://{REF} did not finish within the network "
        "deadline of this command (--deadline 0.5)"
    )


def test_a_re_point_copies_the_digest_to_the_tag(tmp_path: Path) -> None:
    registry(stand_in(tmp_path), BOT, retries=1).retag(REF, DIGEST)
    [call] = calls(tmp_path)
    assert call["argv"][:4] == ["copy", "--quiet", "--all", "--preserve-digests"]
    assert call["argv"][-2:] == [f"docker://{REG}/team/app@{DIGEST}", f"docker://{REF}"]


def test_pin_refuses_a_deadline_that_is_not_positive() -> None:
    err = io.StringIO()
    assert build_image.main(["pin", "127.0.0.1:9/team/app:1.0", "--deadline", "0"], err=err) == 2
    assert err.getvalue() == (
        "error[usage]: --deadline 0: a deadline is a positive number of seconds\n"
        "hint: the default is --deadline 3600\n"
    )
