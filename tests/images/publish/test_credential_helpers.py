"""Registry credentials through Docker credential helpers, as the docker CLI finds them: a real
``docker-credential-NAME`` executable (a shell script on PATH) named by the Docker config's
``credsStore`` or ``credHelpers``, against the htpasswd registry on 127.0.0.1:5001
(``ci/start-registry.sh --auth``; those tests are marked ``registry``) and, through skopeo,
against local HTTP servers that record what they were sent. A helper that is missing, fails, prints garbage, prints
without end or hangs is one error naming the helper and the registry, never a traceback and
never what the helper printed on success; credentials for one host are never sent to another."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

import build_image
from core.errors import CredentialHelperError, RegistryCredentialsError
from images.engine.skopeo import Skopeo, find_credentials
from images.publish.registry import Registry
from testbed.index_server import IndexServer
from tests.support.environment import AUTH_REGISTRY

USER = os.environ.get("CI_REGISTRY_AUTH_USER", "ci")
PASSWORD = os.environ.get("CI_REGISTRY_AUTH_PASSWORD", "ci-password")
SECRET = "s3cret-never-shown-7781"
REPO = "credential-helper-tests/app"
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Helpers:
    """A bin directory of credential helpers on PATH, and a Docker config directory."""

    bin: Path
    config_dir: Path
    log: Path
    env: dict[str, str]

    @property
    def config(self) -> Path:
        return self.config_dir / "config.json"

    def add(self, name: str, body: str) -> None:
        """``docker-credential-NAME``: logs ``ACTION SERVER`` to ``log``, then runs ``body``
        (``$server`` holds what it was asked for)."""
        script = self.bin / f"docker-credential-{name}"
        script.write_text(
            f'#!/bin/sh\nserver=$(cat)\necho "$1 $server" >> "{self.log}"\n{body}\n',
            encoding="utf-8",
        )
        script.chmod(0o755)

    def configure(self, doc: dict[str, object]) -> None:
        self.config.write_text(json.dumps(doc), encoding="utf-8")

    def asked(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []

    def find(self, registry: str, *, timeout: float = 30.0) -> object:
        return find_credentials(registry, env=self.env, docker_config=self.config, timeout=timeout)


def _answer(user: str, secret: str) -> str:
    return json.dumps({"ServerURL": "x", "Username": user, "Secret": secret})


# a helper that knows one login, for the htpasswd registry, and nothing else (the answer of
# docker-credential-helpers for an unknown server: exit 1, "credentials not found ...")
KNOWS_AUTH_REGISTRY = f"""\
if [ "$server" = "{AUTH_REGISTRY}" ]; then
  echo '{_answer(USER, PASSWORD)}'
else
  echo 'credentials not found in native keychain'
  exit 1
fi"""


@pytest.fixture
def helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Helpers:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir()
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("DOCKER_CONFIG", str(config_dir))
    for name in ("USER", "PASSWORD", "HOST"):
        monkeypatch.delenv(f"BUILD_IMAGE_REGISTRY_{name}", raising=False)
    env = {"PATH": path, "DOCKER_CONFIG": str(config_dir)}
    return Helpers(bin=bin_dir, config_dir=config_dir, log=tmp_path / "asked.log", env=env)


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = build_image.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------ the real registry


@pytest.mark.registry
def test_pin_logs_in_through_the_credsstore_helper(helpers: Helpers) -> None:
    helpers.add("vmi-store", KNOWS_AUTH_REGISTRY)
    helpers.configure({"auths": {AUTH_REGISTRY: {}}, "credsStore": "vmi-store"})
    code, out, err = _cli("pin", f"{AUTH_REGISTRY}/{REPO}:missing")
    # past the login: the registry answers 404 for the tag, not 401
    assert (code, out) == (1, "")
    assert err.splitlines()[0] == (
        f"error[tag-not-found]: {AUTH_REGISTRY}/{REPO}:missing: the registry has no such tag"
    )
    assert helpers.asked() == [f"get {AUTH_REGISTRY}"]


@pytest.mark.registry
def test_pin_logs_in_through_the_helper_of_its_host(helpers: Helpers) -> None:
    helpers.add("vmi-host", KNOWS_AUTH_REGISTRY)
    helpers.configure({"credHelpers": {AUTH_REGISTRY: "vmi-host"}})
    code, _, err = _cli("pin", f"{AUTH_REGISTRY}/{REPO}:missing")
    assert code == 1
    assert err.startswith("error[tag-not-found]: ")
    assert helpers.asked() == [f"get {AUTH_REGISTRY}"]


@pytest.mark.registry
def test_a_wrong_password_from_a_helper_names_the_helper(helpers: Helpers) -> None:
    helpers.add("vmi-wrong", f"echo '{_answer(USER, SECRET)}'")
    helpers.configure({"credHelpers": {AUTH_REGISTRY: "vmi-wrong"}})
    code, out, err = _cli("pin", f"{AUTH_REGISTRY}/{REPO}:missing")
    assert code == 1
    assert err.splitlines()[0] == (
        f"error[registry-auth]: the registry {AUTH_REGISTRY} refused the credentials of user "
        f"{USER!r} (from docker-credential-vmi-wrong, the credHelpers of {helpers.config}): "
        "HTTP 401"
    )
    assert SECRET not in out + err


@pytest.mark.registry
def test_without_a_helper_the_registry_wants_a_login(helpers: Helpers) -> None:
    helpers.add("vmi-host", KNOWS_AUTH_REGISTRY)
    helpers.configure({"credHelpers": {"registry.example": "vmi-host"}})
    code, _, err = _cli("pin", f"{AUTH_REGISTRY}/{REPO}:missing")
    assert code == 1
    assert err == (
        f"error[registry-auth]: the registry {AUTH_REGISTRY} requires a login and no "
        "credentials were found for it\n"
        "hint: credentials come from BUILD_IMAGE_REGISTRY_USER and BUILD_IMAGE_REGISTRY_PASSWORD "
        "(for the host BUILD_IMAGE_REGISTRY_HOST names), else from the Docker config: its "
        "credential helper for the host (credHelpers, else credsStore), else its auths "
        "(`docker login REGISTRY`); never from the manifest\n"
    )
    assert helpers.asked() == []  # the helper of another host is never asked


# ------------------------------------------------------------------------------ other hosts


def _manifest(server: IndexServer) -> str:
    """An open registry of one manifest: ``/v2/`` answers (skopeo asks it first), then the
    manifest."""
    path = server.root / "v2" / "team" / "app" / "manifests" / "1.0"
    path.parent.mkdir(parents=True)
    (server.root / "v2" / "index.html").write_text("{}", encoding="utf-8")
    path.write_bytes(
        b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}'
    )
    return f"127.0.0.1:{server.port}"


def test_a_credhelpers_login_is_never_sent_to_another_host(
    helpers: Helpers, index_server: IndexServer
) -> None:
    other = _manifest(index_server)
    helpers.add("vmi-any", f"echo '{_answer(USER, SECRET)}'")  # a login for whatever is asked
    helpers.configure({"credHelpers": {AUTH_REGISTRY: "vmi-any"}})
    code, out, err = _cli("pin", f"{other}/team/app:1.0")
    assert (code, err) == (0, "")
    assert out.startswith(f"{other}/team/app@sha256:")
    assert helpers.asked() == []
    assert [r.headers.get("Authorization") for r in index_server.requests] == [None, None]


def test_a_credsstore_is_asked_for_the_host_itself_only(
    helpers: Helpers, index_server: IndexServer
) -> None:
    other = _manifest(index_server)
    helpers.add("vmi-store", KNOWS_AUTH_REGISTRY)
    helpers.configure({"credsStore": "vmi-store"})
    code, _, err = _cli("pin", f"{other}/team/app:1.0")
    assert (code, err) == (0, "")
    assert helpers.asked() == [f"get {other}"]  # it has none: anonymous
    assert [r.headers.get("Authorization") for r in index_server.requests] == [None, None]


def test_the_environment_wins_and_no_helper_runs(helpers: Helpers) -> None:
    helpers.add("vmi-store", KNOWS_AUTH_REGISTRY)
    helpers.configure({"credsStore": "vmi-store"})
    env = {
        **helpers.env,
        "BUILD_IMAGE_REGISTRY_USER": "bot",
        "BUILD_IMAGE_REGISTRY_PASSWORD": SECRET,
        "BUILD_IMAGE_REGISTRY_HOST": AUTH_REGISTRY,
    }
    creds = find_credentials(AUTH_REGISTRY, env=env, docker_config=helpers.config)
    assert creds is not None
    assert (creds.username, creds.password) == ("bot", SECRET)
    assert helpers.asked() == []


def test_a_command_asks_a_helper_once_per_host(helpers: Helpers) -> None:
    helpers.add("vmi-store", KNOWS_AUTH_REGISTRY)
    helpers.configure({"credsStore": "vmi-store"})
    skopeo = Skopeo(env=helpers.env)
    registry = Registry(skopeo, env=helpers.env, docker_config=helpers.config, timeout=5)
    first = registry.credentials(AUTH_REGISTRY)
    assert registry.credentials(AUTH_REGISTRY) is first
    assert first is not None
    assert (first.username, first.password) == (USER, PASSWORD)
    assert helpers.asked() == [f"get {AUTH_REGISTRY}"]


def test_docker_hub_is_asked_for_by_its_v1_url(helpers: Helpers) -> None:
    helpers.add("vmi-store", f"echo '{_answer('hubber', SECRET)}'")
    helpers.configure({"credsStore": "vmi-store"})
    creds = helpers.find("docker.io")
    assert creds is not None
    assert helpers.asked() == ["get https://index.docker.io/v1/"]


def test_a_helper_without_the_login_leaves_the_auths_entry(helpers: Helpers) -> None:
    helpers.add("vmi-store", KNOWS_AUTH_REGISTRY)
    token = "YWxpY2U6cGE6c3M="  # alice:pa:ss
    helpers.configure(
        {"credsStore": "vmi-store", "auths": {"https://r.example/v1/": {"auth": token}}}
    )
    creds = find_credentials("r.example", env=helpers.env, docker_config=helpers.config)
    assert creds is not None
    assert (creds.username, creds.password, creds.source) == ("alice", "pa:ss", str(helpers.config))
    assert helpers.asked() == ["get r.example"]


# ------------------------------------------------------------------------------ broken helpers


def _refusal(helpers: Helpers, registry: str = "r.example", *, timeout: float = 30.0) -> str:
    with pytest.raises(CredentialHelperError) as exc:
        helpers.find(registry, timeout=timeout)
    assert exc.value.code == "credential-helper"
    text = f"{exc.value.message}\nhint: {exc.value.hint}"
    assert SECRET not in text
    return text


def test_a_failing_helper_is_named_with_its_complaint(helpers: Helpers) -> None:
    helpers.add("vmi-fail", "echo 'the keychain is locked' >&2; exit 3")
    helpers.configure({"credsStore": "vmi-fail"})
    assert _refusal(helpers) == (
        f"the credential helper docker-credential-vmi-fail (the credsStore of {helpers.config}) "
        "for the registry r.example failed (exit status 3: the keychain is locked)\n"
        "hint: try it yourself: `echo r.example | docker-credential-vmi-fail get`; it may need "
        "a login first (`docker login r.example`)"
    )


def test_a_helper_printing_garbage_is_refused_without_showing_it(helpers: Helpers) -> None:
    helpers.add("vmi-garbage", f"echo 'Username: bot Secret: {SECRET}'")
    helpers.configure({"credHelpers": {"r.example": "vmi-garbage"}})
    assert _refusal(helpers) == (
        "the credential helper docker-credential-vmi-garbage (the credHelpers of "
        f"{helpers.config}) for the registry r.example answered with something that is not a "
        'login (the JSON object {"Username": ..., "Secret": ...} of the credential helper '
        "protocol)\n"
        "hint: what it printed is not shown, as it may hold a secret; try it yourself: "
        "`echo r.example | docker-credential-vmi-garbage get`"
    )


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps({"Username": "bot"}) + f" {SECRET}",  # JSON, then more
        json.dumps({"Username": "bot", "Secret": [SECRET]}),  # a secret that is no string
        json.dumps([SECRET]),
        "\\377\\376",  # not UTF-8
    ],
)
def test_answers_that_are_not_a_login(helpers: Helpers, answer: str) -> None:
    (helpers.bin / "answer").write_text(answer, encoding="utf-8")
    helpers.add("vmi-odd", f"printf '%b' \"$(cat '{helpers.bin / 'answer'}')\"")
    helpers.configure({"credsStore": "vmi-odd"})
    assert "answered with something that is not a login" in _refusal(helpers)


def test_a_hanging_helper_is_stopped_at_the_timeout(helpers: Helpers) -> None:
    # the shell waits for its child, which holds the helper's output open: both are stopped
    helpers.add("vmi-hang", f"sleep 600; echo '{_answer(USER, SECRET)}'")
    helpers.configure({"credsStore": "vmi-hang"})
    assert _refusal(helpers, timeout=0.2) == (
        f"the credential helper docker-credential-vmi-hang (the credsStore of {helpers.config}) "
        "for the registry r.example did not answer within 0.2s\n"
        "hint: it may wait for a keychain or a browser login; try it yourself: "
        "`echo r.example | docker-credential-vmi-hang get` (--timeout bounds it)"
    )


def test_pin_bounds_a_hanging_helper_by_its_timeout(helpers: Helpers) -> None:
    helpers.add("vmi-hang", "exec sleep 600")
    helpers.configure({"credsStore": "vmi-hang"})
    code, out, err = _cli("pin", "127.0.0.1:9/team/app:1.0", "--timeout", "0.3")
    assert (code, out) == (1, "")
    assert err.splitlines()[0] == (
        "error[credential-helper]: the credential helper docker-credential-vmi-hang (the "
        f"credsStore of {helpers.config}) for the registry 127.0.0.1:9 did not answer within "
        "0.3s"
    )


def test_a_helper_printing_without_end_is_stopped_within_its_bound(helpers: Helpers) -> None:
    """Under a 1 GB address-space cap: reading all it prints for 30 s would not fit."""
    helpers.add("vmi-flood", "exec yes 0123456789abcdef")
    helpers.configure({"credsStore": "vmi-flood"})
    script = (
        "import resource, sys, build_image\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "sys.exit(build_image.main(['pin', '127.0.0.1:9/team/app:1.0']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **helpers.env},
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines()[0] == (
        "error[credential-helper]: the credential helper docker-credential-vmi-flood (the "
        f"credsStore of {helpers.config}) for the registry 127.0.0.1:9 printed more than "
        "1048576 bytes"
    )


def test_a_missing_helper_is_named(helpers: Helpers) -> None:
    helpers.configure({"credsStore": "desktop-vmi-absent"})
    assert _refusal(helpers) == (
        "the credential helper docker-credential-desktop-vmi-absent (the credsStore of "
        f"{helpers.config}) for the registry r.example is not installed: no "
        "docker-credential-desktop-vmi-absent on PATH\n"
        "hint: install docker-credential-desktop-vmi-absent, or take 'desktop-vmi-absent' out "
        f"of the credsStore of {helpers.config}; or set BUILD_IMAGE_REGISTRY_USER, "
        "BUILD_IMAGE_REGISTRY_PASSWORD and BUILD_IMAGE_REGISTRY_HOST, which win over the "
        "Docker config"
    )


def test_a_helper_name_that_is_a_path_is_refused(helpers: Helpers) -> None:
    helpers.configure({"credHelpers": {"r.example": "../../bin/sh"}})
    assert _refusal(helpers) == (
        f"the credHelpers of {helpers.config} names the credential helper '../../bin/sh', which "
        "is not a helper name\n"
        "hint: a helper is named like desktop, ecr-login or gcloud (docker-credential-NAME)"
    )


def test_an_identity_token_is_refused(helpers: Helpers) -> None:
    helpers.add("vmi-token", f"echo '{_answer('<token>', SECRET)}'")
    helpers.configure({"credsStore": "vmi-token"})
    assert _refusal(helpers).splitlines()[0] == (
        "docker-credential-vmi-token holds an identity token (an OAuth2 refresh token) for the "
        "registry r.example; this tool logs in with a user and a password or token only"
    )


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("{", "not valid JSON: Expecting property name enclosed in double quotes (line 1)"),
        ("[]", "not a JSON object"),
        ('{"credsStore": 7}', "'credsStore' must be a string"),
        ('{"credHelpers": ["x"]}', "'credHelpers' must be an object"),
        (
            '{"auths": {"r.example": {"auth": "%%%"}}}',
            "auths.r.example is not an object whose auth is base64 of USER:PASSWORD",
        ),
        (
            '{"auths": {"r.example": "x"}}',
            "auths.r.example is not an object whose auth is base64 of USER:PASSWORD",
        ),
    ],
)
def test_a_broken_docker_config_is_named(helpers: Helpers, doc: str, message: str) -> None:
    helpers.config.write_text(doc, encoding="utf-8")
    with pytest.raises(RegistryCredentialsError) as exc:
        helpers.find("r.example")
    assert exc.value.message == f"{helpers.config}: {message}"


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_a_hanging_helpers_children_are_stopped_too(helpers: Helpers, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    helpers.add("vmi-child", f"sleep 600 &\necho $! > '{pid_file}'\nwait")
    helpers.configure({"credsStore": "vmi-child"})
    assert "did not answer within 0.3s" in _refusal(helpers, timeout=0.3)
    child = int(pid_file.read_text(encoding="utf-8"))
    for _ in range(100):  # SIGKILL is sent; wait for the kernel to deliver it
        if not _running(child):
            break
        threading.Event().wait(0.05)
    assert not _running(child)
