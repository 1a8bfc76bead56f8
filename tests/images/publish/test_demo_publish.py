"""The demo goes all the way: ``make demo-publish`` (``python -m demo.run_demo --publish``)
publishes what ``make demo`` built, as nightly tags, to the registry ``stack/demo.yaml`` names
(the open one of ci/start-registry.sh), with its release record under build/demo/.

The docker test publishes the real stack/demo.yaml through the demo's own entry, to a fresh
repository of the local registry (``--repository``, so the demo's own tags never move), from two
tiny images labelled as builds of that manifest (a build of the demo takes
minutes; normalized and loaded as a build leaves its image), and checks every recorded digest
against what the registry serves (skopeo).
"""

from __future__ import annotations

import json
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from demo import run_demo
from images.builder.labels import LOCK_INPUTS_LABEL, TITLE_LABEL, VERSION_LABEL
from images.builder.tags import parse_reference
from images.oci.normalize import NormalizedImage
from manifest import TARGETS, load_manifest
from tests.support.environment import DOCKER_CLI as DOCKER
from tests.support.environment import REGISTRY
from tests.support.publishing import served_digest
from tests.support.saved_images import loaded_image

ROOT = Path(__file__).resolve().parents[3]
STACK = ROOT / "stack" / "demo.yaml"


def test_the_demo_stack_publishes_to_the_local_registry_and_records_under_build() -> None:
    m = load_manifest(STACK)
    assert m.image is not None
    assert m.image.repository == f"{run_demo.LOCAL_REGISTRY}/vllm-musa-demo"
    assert parse_reference(m.image.repository).registry == "127.0.0.1:5000"
    assert "start_instance 5000 0" in run_demo.START_REGISTRY.read_text(encoding="utf-8")
    assert run_demo.record_for(STACK) == ROOT / "build" / "demo" / "releases" / f"{m.name}.json"
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "\t$(BIN)/python -m demo.run_demo --publish\n" in make


def test_demo_publish_stops_clearly_when_no_registry_answers(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port on 127.0.0.1 that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stack = tmp_path / "stack" / "demo.yaml"
    stack.parent.mkdir()
    text = STACK.read_text(encoding="utf-8").replace("127.0.0.1:5000/", f"127.0.0.1:{port}/")
    stack.write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        run_demo.ensure_registry(stack)
    assert str(exc.value) == (
        f"no registry answers at 127.0.0.1:{port} (image.repository of {stack}): start one "
        "first, as root `bash ci/start-registry.sh` (Debian's docker-registry on "
        "127.0.0.1:5000), or `docker run -d -p 127.0.0.1:5000:5000 registry:2`"
    )


def _tiny_image(directory: Path, labels: dict[str, str], target: str) -> NormalizedImage:
    files = {"etc/image-name": f"demo {uuid.uuid4()}\n".encode()}
    return loaded_image(directory, files, tag=target, labels=labels, docker=DOCKER)


@pytest.mark.registry
def test_demo_publish_pushes_and_records_the_served_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker_config = tmp_path / "docker-config"
    docker_config.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config))  # no host credentials
    monkeypatch.delenv("BUILD_IMAGE_REGISTRY_USER", raising=False)
    monkeypatch.delenv("BUILD_IMAGE_REGISTRY_PASSWORD", raising=False)
    m = load_manifest(STACK)
    labels = {
        LOCK_INPUTS_LABEL: m.lock_inputs_sha256,
        TITLE_LABEL: m.name,
        VERSION_LABEL: f"v{m.release}",
    }
    built = {t: _tiny_image(tmp_path / t, labels, t) for t in TARGETS}
    images = {t: image.config_digest for t, image in built.items()}
    try:
        reports = {}
        for target, image in built.items():
            reports[target] = tmp_path / f"demo-{target}.json"
            doc = {
                "image_id": image.config_digest,
                "target": target,
                "base_image": "",
                "digest": image.manifest_digest,
                "oci_layout": str(image.layout),
            }
            reports[target].write_text(json.dumps(doc), encoding="utf-8")
        repository = f"{REGISTRY}/demo-publish-tests/{uuid.uuid4().hex[:12]}"
        record = run_demo.publish(
            STACK,
            record=tmp_path / "releases" / "vllm-musa-demo.json",
            repository=repository,
            build_reports=reports,
            date="20261201",
            attach=False,  # stand-in images: no SBOM to attach
        )
        records = json.loads(record.read_text(encoding="utf-8"))["records"]
        assert [(r["target"], r["channel"], r["image_id"]) for r in records] == [
            (t, "nightly", images[t]) for t in TARGETS
        ]
        assert {r["target"]: r["tags"] for r in records} == {
            "final": [f"{repository}:nightly-final"],
            "vllm-openai": [f"{repository}:nightly", f"{repository}:nightly-20261201"],
        }
        for r in records:
            for tag in r["tags"]:
                assert served_digest(tag) == r["digest"], tag
    finally:
        subprocess.run([DOCKER, "rmi", "-f", *images.values()], capture_output=True, check=False)
