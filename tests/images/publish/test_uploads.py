"""What a publish uploads: the accounting over an image's blobs from what its copy did (some
blobs uploaded, some mounted from another repository, the rest already there), the summary
line, and what skopeo's debug log of a copy says. No Docker, no registry."""

from __future__ import annotations

from pathlib import Path

from core.tables import human_size
from images.builder.tags import parse_reference
from images.engine.skopeo import CopyReport, parse_copy_log
from images.publish.uploads import count_upload, image_blobs, render_upload, upload_stats
from images.records import UploadStats
from tests.images.publish.layouts import Image, layer, write_image

DEST = parse_reference("127.0.0.1:5000/team/app")


def _image(tmp_path: Path) -> Image:
    """Config + 5 layers, the first of them twice: had, mounted, uploaded, own."""
    had, mounted, uploaded, own = (layer({f"f{i}": b"x" * (100 * i)}) for i in range(1, 5))
    unknown = layer({"only-here": b"y" * 7})
    return write_image(tmp_path / "app", "vllm-openai", [had, mounted, uploaded, had, unknown, own])


def test_the_accounting_counts_each_blob_once(tmp_path: Path) -> None:
    image = _image(tmp_path)
    had, mounted, uploaded, _, unknown, own = image.layers
    report = CopyReport(
        digest=image.manifest_digest,
        uploaded=frozenset({image.config_digest, uploaded.digest, unknown.digest, own.digest}),
        mounted={mounted.digest: "vendor/musa-base", "sha256:" + "0" * 64: "other/repo"},
    )
    notes: list[str] = []
    stats = upload_stats(image.layout, "vllm-openai", report, DEST, notes.append)
    config = len(image.config)
    assert stats == UploadStats(
        blobs_uploaded=4,
        bytes_uploaded=config + uploaded.size + unknown.size + own.size,
        blobs_reused=2,
        bytes_reused=had.size + mounted.size,
        blobs_mounted=1,
        bytes_mounted=mounted.size,
    )
    assert notes == ["mounted 1 blob from 127.0.0.1:5000/vendor/musa-base"]  # of this image's
    assert render_upload(stats) == (
        f"uploaded 4 blobs ({human_size(stats.bytes_uploaded)}); reused 2 blobs "
        f"({human_size(stats.bytes_reused)}), 1 of them ({human_size(mounted.size)}) "
        "mounted from another repository of the registry"
    )
    assert render_upload(UploadStats(blobs_uploaded=1, bytes_uploaded=1_500_000)) == (
        "uploaded 1 blob (1.50 MB); reused 0 blobs (0 B)"
    )


def test_a_second_copy_uploads_nothing(tmp_path: Path) -> None:
    image = _image(tmp_path)
    notes: list[str] = []
    report = CopyReport(digest=image.manifest_digest)
    stats = upload_stats(image.layout, "vllm-openai", report, DEST, notes.append)
    total = len(image.config) + sum(x.size for x in image.layers[:3] + image.layers[4:])
    assert stats == UploadStats(blobs_reused=6, bytes_reused=total)
    assert notes == []
    assert render_upload(stats) == f"uploaded 0 blobs (0 B); reused 6 blobs ({human_size(total)})"


HAD, MOUNTED, SENT, TRIED = ("sha256:" + c * 64 for c in "1234")
# a skopeo 1.9 `--debug copy` of four blobs to team/app: HAD is there, MOUNTED is mounted from
# vendor/base after a try from old/app failed, TRIED's mount fails and it is uploaded, SENT is
# uploaded (the config, with no mount tried)
COPY_LOG = f"""time="2026-12-05T05:56:05Z" level=debug msg="Checking /v2/team/app/blobs/{HAD}"
time="2026-12-05T05:56:05Z" level=debug msg="... already exists"
time="2026-12-05T05:56:05Z" level=debug msg="Skipping blob {HAD} (already present):"
time="2026-12-05T05:56:05Z" level=debug msg="Trying to mount /v2/team/app/blobs/uploads/?from=old%2Fapp&mount=sha256%3A{MOUNTED[7:]}"
time="2026-12-05T05:56:05Z" level=debug msg="Trying to mount /v2/team/app/blobs/uploads/?from=old%2Fapp&mount=sha256%3A{TRIED[7:]}"
time="2026-12-05T05:56:05Z" level=debug msg="Trying to mount /v2/team/app/blobs/uploads/?from=vendor%2Fbase&mount=sha256%3A{MOUNTED[7:]}"
time="2026-12-05T05:56:05Z" level=debug msg="... mount OK"
time="2026-12-05T05:56:05Z" level=debug msg="Skipping blob {MOUNTED} (already present):"
time="2026-12-05T05:56:05Z" level=debug msg="Upload of layer {TRIED} complete"
time="2026-12-05T05:56:05Z" level=debug msg="Uploading /v2/team/app/blobs/uploads/"
time="2026-12-05T05:56:05Z" level=debug msg="Upload of layer {SENT} complete"
"""


def test_the_copy_log_says_what_was_uploaded_and_mounted() -> None:
    assert parse_copy_log("sha256:" + "f" * 64, COPY_LOG) == CopyReport(
        digest="sha256:" + "f" * 64,
        uploaded=frozenset({TRIED, SENT}),
        mounted={MOUNTED: "vendor/base"},
    )
    assert parse_copy_log("sha256:" + "f" * 64, "") == CopyReport(digest="sha256:" + "f" * 64)


def test_image_blobs_are_the_config_and_the_distinct_layers(tmp_path: Path) -> None:
    image = _image(tmp_path)
    config, layers = image_blobs(image.layout, "vllm-openai")
    assert (config.digest, config.size) == (image.config_digest, len(image.config))
    assert [x.digest for x in layers] == [
        x.digest for x in (image.layers[0], *image.layers[1:3], *image.layers[4:])
    ]
    assert count_upload(
        (config, *layers), uploaded={config.digest, *(x.digest for x in layers)}, mounted=set()
    ) == UploadStats(blobs_uploaded=6, bytes_uploaded=config.size + sum(x.size for x in layers))


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
