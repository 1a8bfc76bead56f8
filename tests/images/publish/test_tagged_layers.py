"""cosign's ``.sig`` and ``.att`` tags as ``publish`` and ``verify`` read them
(``images.publish.attach.tagged_layers``), against a stand-in registry: what a tag holds that
is not a manifest of layers is refused by name, never parsed into a traceback or overwritten."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, cast

import pytest

from core.errors import AttestationError
from images.attest.cosign import SIMPLE_SIGNING_MEDIA_TYPE
from images.builder.tags import ImageReference, parse_reference
from images.publish.attach import tagged_layers
from images.publish.registry import Registry

REPO = parse_reference("r.example/team/app")
TAG = "sha256-" + "a" * 64 + ".sig"


class StandIn:
    """A registry that holds one manifest at ``TAG`` and the blobs it names."""

    def __init__(self, raw: bytes | None, blobs: dict[str, bytes] | None = None) -> None:
        self.raw = raw
        self.blobs = blobs or {}

    def read_raw(self, ref: ImageReference) -> bytes | None:
        assert ref.tag == TAG
        return self.raw

    def fetch_blobs(self, ref: ImageReference, directory: Path) -> dict[str, bytes]:
        assert self.raw is not None
        assert ref.digest == "sha256:" + hashlib.sha256(self.raw).hexdigest()
        return self.blobs


def _read(registry: StandIn, tmp_path: Path) -> Any:
    return tagged_layers(cast(Registry, registry), REPO, TAG, SIMPLE_SIGNING_MEDIA_TYPE, tmp_path)


def test_an_absent_tag_is_none_and_a_manifest_gives_its_layers_of_the_type(
    tmp_path: Path,
) -> None:
    assert _read(StandIn(None), tmp_path) is None
    payload = b'{"critical":{}}'
    digest = "sha256:" + hashlib.sha256(payload).hexdigest()
    manifest = {
        "layers": [
            {"mediaType": SIMPLE_SIGNING_MEDIA_TYPE, "digest": digest, "annotations": {"a": "1"}},
            {"mediaType": "application/octet-stream", "digest": digest},
        ]
    }
    registry = StandIn(json.dumps(manifest).encode(), {digest: payload})
    assert _read(registry, tmp_path) == [(payload, {"a": "1"})]


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'{"manifests": []}', b"[" * 100000])
def test_a_tag_that_holds_no_manifest_of_layers_is_refused_by_name(
    raw: bytes, tmp_path: Path
) -> None:
    with pytest.raises(AttestationError) as exc:
        _read(StandIn(raw), tmp_path)
    assert exc.value.message == (
        f"r.example/team/app:{TAG} is not a manifest of layers: it is not cosign's, and it is "
        "left as it is"
    )
    assert exc.value.hint == f"move what r.example/team/app:{TAG} holds to another tag"
