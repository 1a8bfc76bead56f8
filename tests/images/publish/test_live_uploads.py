"""Publishing costs what changed, against a real registry (Debian's docker-registry,
distribution 2.8, on 127.0.0.1:5000) and a real Docker daemon: an image whose first layers
are a base image's, byte for byte, pushed to another repository of the same registry, gets
those layers by cross-repository mounts (skopeo's, from the repository where it pushed the
base) and uploads only its own layer and its config; a second publish of the same image to a
new tag uploads nothing. The registry then serves every blob of the image in the destination
repository.

The images are written by hand (tests/images/publish/layouts.py) and loaded into the daemon,
as a build leaves its image: the daemon's image id is the layout's config digest. Marked
``registry``: tests/conftest.py skips the tests without the registries, the daemon and skopeo
(and fails them when CI=true)."""

from __future__ import annotations

import io
import json
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import build_image
from core.tables import human_size
from tests.images.publish.layouts import Image, docker_archive, layer, write_image
from tests.support.environment import DOCKER_CLI as DOCKER
from tests.support.environment import REGISTRY

pytestmark = pytest.mark.registry

TARGET = "vllm-openai"
COMPRESSOR = "gzip/zlib-1.2.13/level-6/block-1048576"
STACK = """\
schema: 1
name: pubtest
release: "0.28.0"
target: {{python: "3.12", arch: x86_64, glibc: "2.35"}}
indexes:
  vendor: {{url: "http://127.0.0.1:9/simple"}}
default_index: vendor
image:
  repository: "{repository}"
  release_tags: ["vllm-openai:v{{release}}"]
  nightly_tags: ["vllm-openai:nightly-{{date}}", "vllm-openai:nightly"]
"""


def _cli(*argv: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = build_image.main([str(a) for a in argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _blob_status(repository: str, digest: str) -> int:
    """The status of a plain HEAD on the blob, asked of the registry directly."""
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/{repository}/blobs/{digest}", method="HEAD"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _skopeo_push(image: Image, ref: str) -> str:
    """Copy ``image`` to ``ref`` as it is; the manifest digest the registry now serves."""
    digestfile = image.layout.parent / f"{image.layout.name}.digest"
    subprocess.run(
        ["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
         "--digestfile", str(digestfile), f"oci:{image.layout}:{image.tag}", f"docker://{ref}"],
        capture_output=True, check=True, timeout=300,
    )  # fmt: skip
    return digestfile.read_text(encoding="utf-8").strip()


@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[list[str]]:
    """The image ids loaded into the daemon by the test; removed afterwards."""
    ids: list[str] = []
    yield ids
    if ids:
        subprocess.run([DOCKER, "rmi", "-f", *ids], capture_output=True, check=False)


def _load(image: Image, ids: list[str]) -> None:
    name = f"publish-test/uploads:{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [DOCKER, "load"], input=docker_archive(image, name), capture_output=True, check=True
    )
    ids.append(image.config_digest)


def test_base_layers_are_mounted_and_a_second_publish_uploads_nothing(
    tmp_path: Path, loaded: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    docker_config = tmp_path / "docker-config"
    docker_config.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config))  # no host credentials
    monkeypatch.delenv("BUILD_IMAGE_REGISTRY_USER", raising=False)
    monkeypatch.delenv("BUILD_IMAGE_REGISTRY_PASSWORD", raising=False)
    run = uuid.uuid4().hex[:12]
    base_repo, app_repo = f"publish-tests/{run}-base", f"publish-tests/{run}-app"

    # a "vendor base" of two layers, pushed to its own repository
    base_layers = (
        layer({"usr/lib/musa/libmusa.so": uuid.uuid4().bytes * 4000}),
        layer({"etc/musa-release": f"5.2.0 {run}\n".encode()}),
    )
    base = write_image(tmp_path / "base", "base", base_layers)
    base_digest = _skopeo_push(base, f"{REGISTRY}/{base_repo}:5.2.0")
    # the image: the base's layers byte for byte, then one layer of its own
    own = layer({"opt/vllm/VERSION": f"0.28.0 {run}\n".encode()})
    image = write_image(
        tmp_path / "app", TARGET, [*base_layers, own], labels={"org.example.run": run}
    )
    _load(image, loaded)

    stack = tmp_path / "stack" / "pubtest.yaml"
    stack.parent.mkdir()
    stack.write_text(STACK.format(repository=f"{REGISTRY}/{app_repo}"), encoding="utf-8")
    report = tmp_path / "report.json"
    report.write_text(
        json.dumps(
            {
                "image_id": image.config_digest,
                "target": TARGET,
                "base_image": f"{REGISTRY}/{base_repo}:5.2.0@{base_digest}",
                "digest": image.manifest_digest,
                "oci_layout": str(image.layout),
                "compressor": COMPRESSOR,
            }
        ),
        encoding="utf-8",
    )
    record = tmp_path / "releases" / "pubtest.json"

    def publish(date: str, *extra: str) -> tuple[int, str, str]:
        return _cli(
            "publish",
            stack,
            "--target",
            TARGET,
            "--nightly",
            "--build-report",
            report,
            "--record",
            record,
            "--date",
            date,
            "--no-attach",
            *extra,
        )  # fmt: skip  (a stand-in image: no SBOM or lock to attach)

    blobs = {image.config_digest: len(image.config)} | {x.digest: x.size for x in image.layers}
    for digest in blobs:
        assert _blob_status(app_repo, digest) == 404  # a new repository: it has nothing
    mounted_bytes = sum(x.size for x in base_layers)
    own_bytes = own.size + len(image.config)

    code, out, err = publish("20261129", "--json")
    assert code == 0, err
    first = {
        "blobs_mounted": 2, "blobs_reused": 2, "blobs_uploaded": 2,
        "bytes_mounted": mounted_bytes, "bytes_reused": mounted_bytes, "bytes_uploaded": own_bytes,
    }  # fmt: skip
    doc: dict[str, Any] = json.loads(out)
    assert doc["upload"] == first
    assert doc["digest"] == image.manifest_digest
    assert f"mounted 2 blobs from {REGISTRY}/{base_repo}" in err.splitlines()
    assert (
        f"uploaded 2 blobs ({human_size(own_bytes)}); reused 2 blobs "
        f"({human_size(mounted_bytes)}), 2 of them ({human_size(mounted_bytes)}) mounted from "
        "another repository of the registry"
    ) in err.splitlines()
    # the registry serves every blob of the image in the destination repository
    for digest in blobs:
        assert _blob_status(app_repo, digest) == 200

    code, out, err = publish("20261130")  # the same image under a new tag
    assert code == 0, err
    total = sum(blobs.values())
    app = f"{REGISTRY}/{app_repo}"
    assert out.splitlines() == [
        f"{app}@{image.manifest_digest}  (nightly)",
        f"{app}@{image.manifest_digest}  (nightly-20261130)",
        f"moved {app}:nightly-20261130: (new) -> {image.manifest_digest}",
        f"uploaded 0 blobs (0 B); reused 4 blobs ({human_size(total)})",
        f"recorded in {record}",
    ]
    records = json.loads(record.read_text(encoding="utf-8"))["records"]
    assert [r["upload"] for r in records] == [
        first,
        {
            "blobs_mounted": 0, "blobs_reused": 4, "blobs_uploaded": 0,
            "bytes_mounted": 0, "bytes_reused": total, "bytes_uploaded": 0,
        },
    ]  # fmt: skip
    assert [r["compressor"] for r in records] == [COMPRESSOR, COMPRESSOR]
    for digest in blobs:
        assert _blob_status(app_repo, digest) == 200
