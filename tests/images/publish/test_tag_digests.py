"""Pins: a tag rendered as the digest it serves (per platform for a multi-arch index), and
every recorded tag checked against what the registry serves."""

from __future__ import annotations

from images.builder.tags import ImageReference, parse_reference
from images.engine.skopeo import OCI_INDEX, ManifestInfo
from images.publish.registry import Registry
from images.publish.tag_digests import check_pins, render_pin
from tests.support.publishing import (
    AMD,
    ARM,
    D1,
    D2,
    D3,
    INDEX_DIGEST,
    REPO,
    FakeSkopeo,
    record,
)


def test_multi_arch_index_pin(fake: str) -> None:
    ref = parse_reference(f"{fake}/x:multi")
    skopeo = FakeSkopeo()
    registry = Registry(skopeo, env={}, docker_config=None, timeout=5)  # type: ignore[arg-type]
    info = registry.require(ref)
    assert info.is_index
    assert render_pin(ref, info) == [
        f"{fake}/x@{INDEX_DIGEST}",
        f"{fake}/x:multi is a multi-arch index ({OCI_INDEX}) of 2 manifests; the digest above "
        "pins the index. Per platform:",
        f"  linux/amd64      {fake}/x@{AMD}",
        f"  linux/arm64/v8   {fake}/x@{ARM}",
    ]


def test_check_pins_names_the_drifted_tags() -> None:
    records = [
        record(D1, tags=(f"{REPO}:nightly", f"{REPO}:nightly-20261129")),
        record(D2, tags=(f"{REPO}:nightly", f"{REPO}:nightly-20261130")),
    ]
    served = {"nightly": D3, "nightly-20261129": D1, "nightly-20261130": None}
    asked: list[str] = []

    def lookup(ref: ImageReference) -> ManifestInfo | None:
        asked.append(str(ref))
        digest = served[ref.reference]
        return ManifestInfo(digest=digest, media_type="x") if digest else None

    checked = check_pins(records, lookup)
    assert (
        asked
        == sorted(asked)
        == [
            f"{REPO}:nightly",
            f"{REPO}:nightly-20261129",
            f"{REPO}:nightly-20261130",
        ]
    )
    assert checked.ok_tags() == [(f"{REPO}:nightly-20261129", D1)]
    assert [d.describe() for d in checked.drifts] == [
        f"{REPO}:nightly: recorded {D2}, the registry serves {D3}",
        f"{REPO}:nightly-20261130: recorded {D2}, the registry no longer has the tag",
    ]
