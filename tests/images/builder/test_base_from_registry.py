"""A base pinned by digest in a real registry (Debian's docker-registry on 127.0.0.1:5000):
the built image's base layers are the registry's blobs, byte for byte, fetched once into the
host's store with skopeo; only the image's own layer is normalized."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from images.builder.base_source import BASE_STORE, normalizing_for
from images.builder.reproducible import normalize_built
from images.engine.docker_build import DockerEngine
from images.engine.skopeo import Skopeo
from images.oci.layout import find_manifest, manifest_parts
from tests.support.environment import DOCKER_CLI as DOCKER
from tests.support.environment import REGISTRY

pytestmark = [pytest.mark.docker, pytest.mark.registry]
EPOCH = 1764633600
OCI_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def _run(*argv: str, stdin: str | None = None) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def pinned_base(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image of its own on debian:bookworm-slim, pushed to a repository of its own and
    pinned by its digest. Never debian:bookworm-slim itself: a push gives the pushed image a
    repository digest, and the demo's base must stay an image with none."""
    repo = f"{REGISTRY}/base-tests/sdk-{uuid.uuid4().hex[:8]}"
    context = tmp_path_factory.mktemp("sdk")
    (context / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN echo 5.2 > /sdk\n")
    subprocess.run(
        [DOCKER, "build", "-q", "-t", f"{repo}:5.2", str(context)],
        capture_output=True, text=True, check=True, env={**os.environ, "DOCKER_BUILDKIT": "1"},
    )  # fmt: skip
    _run(DOCKER, "push", "-q", f"{repo}:5.2")
    raw = _run("skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{repo}:5.2")
    return f"{repo}:5.2@sha256:{hashlib.sha256(raw.encode()).hexdigest()}"


def test_the_base_layers_are_the_registrys_blobs(pinned_base: str, tmp_path: Path) -> None:
    name, digest = pinned_base.rsplit(":5.2@", 1)
    raw = _run("skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{name}@{digest}")
    served = json.loads(raw)["layers"]
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(
        f"FROM {pinned_base}\nARG SOURCE_DATE_EPOCH={EPOCH - 60}\nRUN echo own > /own\n"
    )
    built = subprocess.run(
        [DOCKER, "build", "-q", str(tmp_path / "ctx")],
        capture_output=True, text=True, check=True, env={**os.environ, "DOCKER_BUILDKIT": "1"},
    ).stdout.strip()  # fmt: skip
    notes: list[str] = []
    engine = DockerEngine(env=os.environ)
    try:
        how = normalizing_for(
            pinned_base,
            engine=engine,
            cache_root=tmp_path / "cache",
            env={},
            fetcher=Skopeo(env=os.environ),
            progress=notes.append,
        )
        image = normalize_built(
            engine, built, layout=tmp_path / "layout", epoch=EPOCH, tag="t", how=how
        )
    finally:
        engine.close()
    _, manifest = find_manifest(image.layout, "t")
    _, layers = manifest_parts(manifest, where="test")
    base = [{"digest": d.digest, "size": d.size} for d in layers[: len(served)]]
    assert base == [{"digest": x["digest"], "size": x["size"]} for x in served]
    assert {d.media_type for d in layers} == {OCI_GZIP}
    assert [x.origin for x in image.layers] == ["base"] * len(served) + ["normalized"]
    assert image.layers[-1].clamp == EPOCH - 60  # the stage's time, from the history
    assert notes[0].startswith(f"fetching the base image's blobs from {REGISTRY}")
    store = tmp_path / "cache" / BASE_STORE / pinned_base.rsplit("sha256:", 1)[1]
    assert sorted(p.name for p in (store / "blobs" / "sha256").iterdir()) == sorted(
        [x["digest"][7:] for x in served] + [json.loads(raw)["config"]["digest"][7:]]
    )
    inspect = json.loads(_run(DOCKER, "image", "inspect", image.image_id))[0]
    assert inspect["Id"] == image.image_id  # loaded back without streaming the base again
