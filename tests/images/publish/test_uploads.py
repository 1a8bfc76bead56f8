"""What a publish uploads: the accounting over an image's blobs with a fake registry (some
blobs present, some mountable from the base's repository, some neither), the summary line,
and the registry client's blob calls against a local HTTP server playing a registry (HEAD on
a blob, a mount that is made, a mount declined whose upload session is cancelled, and the
Bearer scopes a mount asks for). No Docker, no real registry."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qsl, urlsplit

import pytest

from core.errors import RegistryAuthError, RegistryError
from core.tables import human_size
from images.builder.tags import parse_reference
from images.publish.registry import Credentials, RegistryClient
from images.publish.uploads import (
    count_upload,
    image_blobs,
    mount_source,
    prepare_upload,
    render_upload,
)
from images.records import UploadStats
from tests.images.publish.layouts import Image, layer, write_image
from tests.support.publishing import serving

DEST = parse_reference("127.0.0.1:5000/team/app")
BASE = "127.0.0.1:5000/vendor/musa-base:5.2.0@sha256:" + "b" * 64


@dataclass
class FakeBlobs:
    """A registry's blobs by repository; ``declines`` are the digests a mount is refused for
    (the registry answers 202, as when it cannot mount); every call is logged."""

    repos: dict[str, set[str]]
    declines: set[str] = field(default_factory=set)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    unreadable: set[str] = field(default_factory=set)  # repositories the account may not read

    def blob_exists(self, repository: str, digest: str) -> bool:
        self.calls.append(("HEAD", repository, digest))
        if repository in self.unreadable:
            raise RegistryAuthError(f"the registry denies HEAD on {repository} (HTTP 403)")
        return digest in self.repos.get(repository, set())

    def mount_blob(self, repository: str, digest: str, source_repository: str) -> bool:
        self.calls.append(("MOUNT", repository, digest, source_repository))
        if digest in self.declines or digest not in self.repos.get(source_repository, set()):
            return False
        self.repos.setdefault(repository, set()).add(digest)
        return True


def _image(tmp_path: Path) -> Image:
    """Config + 5 layers, the first of them twice: had, mountable, declined, base-less, own."""
    had, mountable, declined, own = (layer({f"f{i}": b"x" * (100 * i)}) for i in range(1, 5))
    unknown = layer({"only-here": b"y" * 7})
    return write_image(
        tmp_path / "app", "vllm-openai", [had, mountable, declined, had, unknown, own]
    )


def test_the_accounting_counts_each_blob_once(tmp_path: Path) -> None:
    image = _image(tmp_path)
    had, mountable, declined, _, unknown, own = image.layers
    registry = FakeBlobs(
        repos={
            "team/app": {had.digest},
            "vendor/musa-base": {had.digest, mountable.digest, declined.digest},
        },
        declines={declined.digest},
    )
    notes: list[str] = []
    stats = prepare_upload(
        registry, destination=DEST, layout=image.layout, tag="vllm-openai", base_image=BASE,
        progress=notes.append,
    )  # fmt: skip
    config = len(image.config)
    assert stats == UploadStats(
        blobs_uploaded=4,
        bytes_uploaded=config + declined.size + unknown.size + own.size,
        blobs_reused=2,
        bytes_reused=had.size + mountable.size,
        blobs_mounted=1,
        bytes_mounted=mountable.size,
    )
    # the destination is asked once per distinct blob; the base only for the layers it
    # lacks, and a mount is asked only of what the base has
    assert registry.calls == [
        ("HEAD", "team/app", image.config_digest),
        *(("HEAD", "team/app", x.digest) for x in (had, mountable, declined, unknown, own)),
        ("HEAD", "vendor/musa-base", mountable.digest),
        ("MOUNT", "team/app", mountable.digest, "vendor/musa-base"),
        ("HEAD", "vendor/musa-base", declined.digest),
        ("MOUNT", "team/app", declined.digest, "vendor/musa-base"),  # declined: uploaded
        ("HEAD", "vendor/musa-base", unknown.digest),
        ("HEAD", "vendor/musa-base", own.digest),
    ]
    assert notes == ["mounted 1 blob of the base image from 127.0.0.1:5000/vendor/musa-base"]
    assert render_upload(stats) == (
        f"uploaded 4 blobs ({human_size(stats.bytes_uploaded)}); reused 2 blobs "
        f"({human_size(stats.bytes_reused)}), 1 of them ({human_size(mountable.size)}) "
        "mounted from the base image's repository"
    )
    assert render_upload(UploadStats(blobs_uploaded=1, bytes_uploaded=1_500_000)) == (
        "uploaded 1 blob (1.50 MB); reused 0 blobs (0 B)"
    )


def test_a_second_copy_uploads_nothing(tmp_path: Path) -> None:
    image = _image(tmp_path)
    everything = {image.config_digest, *(x.digest for x in image.layers)}
    registry = FakeBlobs(repos={"team/app": everything})
    stats = prepare_upload(
        registry, destination=DEST, layout=image.layout, tag="vllm-openai", base_image=BASE,
        progress=lambda _: None,
    )  # fmt: skip
    total = len(image.config) + sum(x.size for x in image.layers[:3] + image.layers[4:])
    assert stats == UploadStats(blobs_reused=6, bytes_reused=total)
    assert all(call[1] == "team/app" for call in registry.calls)  # no base, no mount asked
    assert render_upload(stats) == f"uploaded 0 blobs (0 B); reused 6 blobs ({human_size(total)})"


def test_a_base_the_account_cannot_read_is_uploaded_instead(tmp_path: Path) -> None:
    image = _image(tmp_path)
    registry = FakeBlobs(repos={"vendor/musa-base": set()}, unreadable={"vendor/musa-base"})
    notes: list[str] = []
    stats = prepare_upload(
        registry, destination=DEST, layout=image.layout, tag="vllm-openai", base_image=BASE,
        progress=notes.append,
    )  # fmt: skip
    assert (stats.blobs_uploaded, stats.blobs_reused, stats.blobs_mounted) == (6, 0, 0)
    assert notes == [
        "cannot mount the base image's layers from vendor/musa-base (the registry denies HEAD "
        "on vendor/musa-base (HTTP 403)); the copy uploads them"
    ]


@pytest.mark.parametrize(
    ("base", "source"),
    [
        (BASE, "vendor/musa-base"),
        ("registry.mthreads.com/vendor/musa-base:5.2.0", None),  # another registry
        ("debian:bookworm-slim", None),  # Docker Hub
        ("127.0.0.1:5000/team/app:base", None),  # the destination itself: nothing to mount
        ("not a reference", None),
        (None, None),
        ("", None),
    ],
)
def test_the_base_is_mounted_from_on_the_same_registry_only(
    base: str | None, source: str | None
) -> None:
    assert mount_source(base, DEST) == source


def test_image_blobs_are_the_config_and_the_distinct_layers(tmp_path: Path) -> None:
    image = _image(tmp_path)
    config, layers = image_blobs(image.layout, "vllm-openai")
    assert (config.digest, config.size) == (image.config_digest, len(image.config))
    assert [x.digest for x in layers] == [
        x.digest for x in (image.layers[0], *image.layers[1:3], *image.layers[4:])
    ]
    assert count_upload((config, *layers), present=set(), mounted=set()) == UploadStats(
        blobs_uploaded=6, bytes_uploaded=config.size + sum(x.size for x in layers)
    )


def test_upload_stats_json_round_trips() -> None:
    stats = UploadStats(
        blobs_uploaded=1, bytes_uploaded=2, blobs_reused=3, bytes_reused=40, blobs_mounted=2,
        bytes_mounted=30,
    )  # fmt: skip
    doc = stats.to_json()
    assert doc == {
        "blobs_mounted": 2, "blobs_reused": 3, "blobs_uploaded": 1, "bytes_mounted": 30,
        "bytes_reused": 40, "bytes_uploaded": 2,
    }  # fmt: skip
    assert UploadStats.from_json(doc, where="r.json", keypath="upload") == stats


# ------------------------------------------------------------------------------ the client

HAD = "sha256:" + "1" * 64
MOUNTED = "sha256:" + "2" * 64
DECLINED = "sha256:" + "3" * 64
BROKEN = "sha256:" + "4" * 64
SESSION = "/v2/team/app/blobs/uploads/5f1c-session?_state=opaque"


class BlobRegistry(http.server.BaseHTTPRequestHandler):
    """/v2/team/app/blobs/...: HAD is there, MOUNTED mounts (201), DECLINED opens an upload
    session instead (202, SESSION), BROKEN answers 400; with ``bearer``, behind tokens from
    /token whose scopes are logged."""

    log: ClassVar[list[tuple[str, str]]] = []
    bearer: ClassVar[bool] = False
    port: ClassVar[int] = 0

    def _send(self, code: int, headers: dict[str, str] | None = None) -> None:
        body = b'{"errors":[{"code":"BLOB_UPLOAD_INVALID","message":"no"}]}' if code == 400 else b""
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _authorized(self) -> bool:
        if not self.bearer:
            return True
        if self.path.startswith("/token"):
            return True
        if self.headers.get("Authorization") == "Bearer tok":
            return True
        realm = f"http://127.0.0.1:{self.port}/token"
        scope = "repository:team/app:pull,push repository:vendor/base:pull"
        challenge = f'Bearer realm="{realm}",service="fake",scope="{scope}"'
        self._send(401, {"WWW-Authenticate": challenge})
        return False

    def _handle(self) -> None:
        self.log.append((self.command, self.path))
        if not self._authorized():
            return
        path = urlsplit(self.path).path
        query = dict(parse_qsl(urlsplit(self.path).query))
        if path == "/token":
            body = json.dumps({"token": "tok"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.command == "HEAD" and path.startswith("/v2/team/app/blobs/"):
            digest = path.rsplit("/", 1)[1]
            self._send({HAD: 200, BROKEN: 400}.get(digest, 404))
        elif self.command == "POST" and path == "/v2/team/app/blobs/uploads/":
            mount = query.get("mount")
            if mount == MOUNTED and query.get("from") == "vendor/base":
                self._send(201, {"Location": f"/v2/team/app/blobs/{mount}"})
            elif mount == BROKEN:
                self._send(400)
            else:
                self._send(202, {"Location": SESSION})
        elif self.command == "DELETE" and self.path == SESSION:
            self._send(204)
        else:
            self._send(404)

    do_HEAD = do_POST = do_DELETE = do_GET = _handle

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def blob_registry() -> Iterator[str]:
    BlobRegistry.log.clear()
    BlobRegistry.bearer = False
    with serving(BlobRegistry) as address:
        BlobRegistry.port = int(address.rsplit(":", 1)[1])
        yield address


def test_blob_exists_is_a_head(blob_registry: str) -> None:
    with RegistryClient(blob_registry, retries=0) as client:
        assert client.blob_exists("team/app", HAD) is True
        assert client.blob_exists("team/app", MOUNTED) is False
        with pytest.raises(RegistryError) as exc:
            client.blob_exists("team/app", BROKEN)
    assert exc.value.message == f"HEAD team/app@{BROKEN} on {blob_registry}: HTTP 400 Bad Request"
    assert BlobRegistry.log == [("HEAD", f"/v2/team/app/blobs/{d}") for d in (HAD, MOUNTED, BROKEN)]


def test_a_mount_made_and_a_mount_declined_whose_session_is_cancelled(
    blob_registry: str,
) -> None:
    with RegistryClient(blob_registry, retries=0) as client:
        assert client.mount_blob("team/app", MOUNTED, "vendor/base") is True
        assert client.mount_blob("team/app", DECLINED, "vendor/base") is False
        with pytest.raises(RegistryError) as exc:
            client.mount_blob("team/app", BROKEN, "vendor/base")
    assert exc.value.message == (
        f"POST a mount of {BROKEN} into team/app on {blob_registry}: HTTP 400 "
        "BLOB_UPLOAD_INVALID: no"
    )
    post = "/v2/team/app/blobs/uploads/?mount=sha256%3A{}&from=vendor%2Fbase"
    assert BlobRegistry.log == [
        ("POST", post.format("2" * 64)),
        ("POST", post.format("3" * 64)),
        ("DELETE", SESSION),  # the session the declined mount opened
        ("POST", post.format("4" * 64)),
    ]


def test_a_mount_asks_the_token_service_for_both_repositories(blob_registry: str) -> None:
    BlobRegistry.bearer = True
    creds = Credentials(username="bot", password="right", source="test")
    with RegistryClient(blob_registry, credentials=creds, retries=0) as client:
        assert client.mount_blob("team/app", MOUNTED, "vendor/base") is True
    [token] = [path for method, path in BlobRegistry.log if path.startswith("/token")]
    assert parse_qsl(urlsplit(token).query) == [
        ("scope", "repository:team/app:pull,push"),
        ("scope", "repository:vendor/base:pull"),
        ("service", "fake"),
    ]
