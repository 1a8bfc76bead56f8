"""Tag digests: what digest a tag means now (``pin``), and whether every recorded tag still serves
its recorded digest (``verify-pins``). Rendering and comparison are pure; the registry is
asked through the ``lookup`` it is given."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from images.builder.tags import ImageReference, parse_reference
from images.engine.skopeo import ManifestInfo
from images.records import Drift, ReleaseRecord, expected_digests


def render_pin(ref: ImageReference, info: ManifestInfo) -> list[str]:
    if not info.is_index:
        return [ref.pinned(info.digest)]
    lines = [
        ref.pinned(info.digest),
        f"{ref} is a multi-arch index ({info.media_type}) of {len(info.platforms)} manifests; "
        "the digest above pins the index. Per platform:",
    ]
    lines += [f"  {p.platform:<16} {ref.pinned(p.digest)}" for p in info.platforms]
    return lines


@dataclass(frozen=True, kw_only=True)
class PinCheck:
    expected: dict[str, str]  # tag -> the digest its latest record holds
    drifts: tuple[Drift, ...]

    def ok_tags(self) -> list[tuple[str, str]]:
        drifted = {d.tag for d in self.drifts}
        return [(tag, digest) for tag, digest in self.expected.items() if tag not in drifted]


def check_pins(
    records: Sequence[ReleaseRecord],
    lookup: Callable[[ImageReference], ManifestInfo | None],
) -> PinCheck:
    """Ask the registry (``lookup``) for every recorded tag and compare with the records."""
    expected = expected_digests(records)
    drifts = []
    for tag, digest in expected.items():
        info = lookup(parse_reference(tag))
        if info is None or info.digest != digest:
            drifts.append(Drift(tag=tag, recorded=digest, served=info.digest if info else None))
    return PinCheck(expected=expected, drifts=tuple(drifts))
