"""The image labels: source and revision name one repository and commit (the product source),
the vLLM and tooling labels, a creation time that is never the wall clock, and no path of the
build machine in a label, a render or a build report."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from core.errors import ContextError, ManifestError, SourceError, UsageError
from core.file_store import FileStore
from images.builder.context import read_product_pins, render_for
from images.builder.labels import (
    ImageLabels,
    image_labels,
    product_source,
    public_git_url,
    vllm_tag_of,
)
from images.builder.pipeline import (
    ImageBuildRequest,
    StageRequest,
    build_report,
    label_args,
    stage,
)
from images.builder.plan import plan_inputs
from images.builder.render import source_date_epoch
from images.builder.reproducible import Normalized
from images.builder.workspace import Workspace
from images.oci.normalize import rfc3339
from manifest import Manifest, load_manifest
from resolver.lockfile import LockedPackage
from tests.sources.sdistgen import write_sdist
from tests.support.gitrepo import git
from tests.support.images import MANIFEST, lock_for, manifest, render_text, stage_ready

REPO = Path(__file__).resolve().parents[3]
VLLM_REV = "2cf0a6915ce544dc493a0990f2ea38d81601128a"
MUSA_REV = "070c0ea09ec266972fd6097937fde97d400d70ed"
GIT_SOURCES = MANIFEST.replace(
    "  vllm: {path: demo/vllm, env: {VLLM_TARGET_DEVICE: empty}}\n"
    "  vllm-musa: {path: demo/vllm-musa}\n",
    f'  vllm: {{git: "https://github.com/vllm-project/vllm.git", rev: "{VLLM_REV}"}}\n'
    f'  vllm-musa: {{git: "git@github.com:MooreThreads/vllm-musa.git", rev: "{MUSA_REV}"}}\n',
)


def _label_block(text: str) -> list[str]:
    return text.split("\nLABEL ", 1)[1].split("\n\n", 1)[0].splitlines()


# ------------------------------------------------------------------------------ the values


def test_the_real_stack_labels_name_vllm_musa_and_its_vllm_commit() -> None:
    m = load_manifest(REPO / "stack" / "vllm-musa-0.28.0-py312.yaml")
    assert image_labels(m) == ImageLabels(
        source="https://github.com/MooreThreads/vllm-musa",
        revision=MUSA_REV,
        version="v0.28.0",
        vllm_revision=VLLM_REV,
        vllm_version="0.28.0",
        mooncake_version="",  # off in the py312 stack: no cp312 wheel
        licenses="Apache-2.0",
        description="vLLM 0.28.0 for Moore Threads GPUs (vLLM-MUSA), stack vllm-musa-0.28.0-py312",
    )


def test_git_sources_render_source_and_revision_of_one_repository(tmp_path: Path) -> None:
    m = manifest(tmp_path, GIT_SOURCES)
    assert _label_block(render_text(m)) == [
        'org.opencontainers.image.created="${IMAGE_CREATED}" \\',
        '      org.opencontainers.image.source="https://github.com/MooreThreads/vllm-musa" \\',
        f'      org.opencontainers.image.revision="{MUSA_REV}" \\',
        '      org.opencontainers.image.version="v0.1.0" \\',
        '      org.opencontainers.image.title="demo" \\',
        '      org.opencontainers.image.description="vLLM 0.1.0 for Moore Threads GPUs (vLLM-MUSA), stack demo" \\',
        '      org.opencontainers.image.licenses="Apache-2.0" \\',
        '      org.opencontainers.image.base.name="debian:bookworm-slim" \\',
        f'      io.vllm-musa.vllm.revision="{VLLM_REV}" \\',
        '      io.vllm-musa.vllm.version="0.1.0" \\',
        # upstream's label of the vLLM tag: no PINS at hand, so the vLLM version
        '      com.mthreads.vllm.version="0.1.0" \\',
        '      io.vllm-musa.tooling.revision="${TOOLING_REVISION}" \\',
        f'      io.vllm-musa.lock.sha256="{"cd" * 32}" \\',
        f'      io.vllm-musa.lock-inputs.sha256="{m.lock_inputs_sha256}"',
    ]


def test_path_sources_give_no_source_revision_or_vllm_label(tmp_path: Path) -> None:
    assert image_labels(manifest(tmp_path)) == ImageLabels(
        source="",
        revision="",
        version="v0.1.0",
        vllm_revision="",
        vllm_version="",
        mooncake_version="",
        licenses="Apache-2.0",
        description="vLLM 0.1.0 for Moore Threads GPUs (vLLM-MUSA), stack demo",
    )


def test_product_true_names_the_product_over_the_default(tmp_path: Path) -> None:
    text = GIT_SOURCES.replace(f'rev: "{VLLM_REV}"}}', f'rev: "{VLLM_REV}", product: true}}')
    m = manifest(tmp_path, text)
    assert product_source(m) is m.sources[0]
    labels = image_labels(m)
    assert (labels.source, labels.revision) == (
        "https://github.com/vllm-project/vllm",
        VLLM_REV,
    )


def test_without_a_vllm_musa_source_there_is_no_product(tmp_path: Path) -> None:
    m = manifest(tmp_path, GIT_SOURCES.replace("  vllm-musa: {git", "  plugin: {git"))
    assert product_source(m) is None
    assert (image_labels(m).source, image_labels(m).revision) == ("", "")


def test_two_products_are_refused(tmp_path: Path) -> None:
    text = MANIFEST.replace("{path: demo/vllm, env:", "{path: demo/vllm, product: true, env:")
    text = text.replace("{path: demo/vllm-musa}", "{path: demo/vllm-musa, product: true}")
    with pytest.raises(ManifestError) as info:
        manifest(tmp_path, text)
    assert info.value.message.endswith(
        "sources.vllm-musa.product: sources.vllm is the product already; one source names the image"
    )
    assert info.value.hint == (
        "keep product: true on one source (the default is the source named 'vllm-musa')"
    )


@pytest.mark.parametrize(
    ("url", "label"),
    [
        # the repository, not its .git remote: upstream's label is
        # https://github.com/MooreThreads/vllm-musa (docker/musa.Dockerfile @ 194301ec)
        ("https://github.com/MooreThreads/vllm-musa.git", "https://github.com/MooreThreads/vllm-musa"),
        ("https://github.com/MooreThreads/vllm-musa", "https://github.com/MooreThreads/vllm-musa"),
        ("git@github.com:MooreThreads/vllm-musa.git", "https://github.com/MooreThreads/vllm-musa"),
        ("ssh://git.example:2222/team/vllm-musa.git", "https://git.example/team/vllm-musa"),
        ("https://ci:t0ken@git.example/vllm-musa.git", "https://git.example/vllm-musa"),
        ("file:///home/builder/src/vllm-musa", ""),
    ],
)  # fmt: skip
def test_the_source_label_is_an_https_url_or_nothing(url: str, label: str) -> None:
    assert public_git_url(url) == label


# ------------------------------------------------------------------------------ com.mthreads.vllm.version

VLLM_TAG_LABEL = "com.mthreads.vllm.version"


def test_the_vllm_tag_is_the_product_pins_else_the_vllm_version() -> None:
    labels = ImageLabels(
        source="",
        revision="",
        version="v0.28.0",
        vllm_revision=VLLM_REV,
        vllm_version="0.28.0",
        mooncake_version="",
        licenses="Apache-2.0",
        description="d",
    )
    assert vllm_tag_of(labels, {"VLLM_TAG": "v0.28.0", "VLLM_COMMIT": VLLM_REV}) == "v0.28.0"
    assert vllm_tag_of(labels, {"VLLM_COMMIT": VLLM_REV}) == "0.28.0"
    assert vllm_tag_of(labels, {"VLLM_TAG": ""}) == "0.28.0"
    assert vllm_tag_of(labels, None) == "0.28.0"
    no_vllm = dataclasses.replace(labels, vllm_revision="", vllm_version="")
    assert vllm_tag_of(no_vllm, None) == ""  # the label is left out, never empty


def _staged_labels(tmp_path: Path, pins: str | None) -> tuple[list[str], list[str]]:
    """The label blocks of the staged Dockerfile and of ``render`` for the demo manifest whose
    product source (vllm-musa, a path source) has ``pins`` as its third_party/PINS."""
    m, _, lock_dir, cache = stage_ready(tmp_path)
    if pins is not None:
        (tmp_path / "demo" / "vllm-musa" / "third_party").mkdir()
        (tmp_path / "demo" / "vllm-musa" / "third_party" / "PINS").write_text(pins, "utf-8")
    return _labels_of(tmp_path, m, lock_dir, cache)


def _labels_of(
    tmp_path: Path, m: Manifest, lock_dir: Path, cache: FileStore
) -> tuple[list[str], list[str]]:
    """The label blocks of ``m`` staged in ``tmp_path`` and rendered by ``render``."""
    request = StageRequest(
        manifest=m,
        target="final",
        workspace=Workspace(tmp_path),
        env={},
        cache_dir=cache.root,
        lock_dir=lock_dir,
    )
    staged = stage(request)
    _, rendered = render_for(
        m, lock_dir, repo_root=tmp_path, cache=cache, git_cache=cache.root / "git"
    )
    return _label_block(staged.dockerfile_text), _label_block(rendered)


def test_render_and_build_label_the_vllm_tag_of_the_product_pins(tmp_path: Path) -> None:
    staged, rendered = _staged_labels(tmp_path, f"VLLM_TAG=v0.28.0\nVLLM_COMMIT={VLLM_REV}\n")
    at = staged.index('      io.vllm-musa.tooling.revision="${TOOLING_REVISION}" \\')
    assert staged[at - 1] == f'      {VLLM_TAG_LABEL}="v0.28.0" \\'
    # both read the PINS of the product source at its revision (here a path source) before
    # they render: the committed render is the Dockerfile a build builds
    assert rendered == staged


def test_a_product_without_pins_or_without_a_vllm_tag_gives_no_label(tmp_path: Path) -> None:
    for pins, sub in ((None, "none"), (f"VLLM_COMMIT={VLLM_REV}\n", "no-tag")):
        staged, rendered = _staged_labels(tmp_path / sub, pins)
        assert staged == rendered
        assert [line for line in staged if VLLM_TAG_LABEL in line] == []


def _upstream_repo(root: Path) -> tuple[Path, str]:
    """A vllm-musa repository whose pinned commit's PINS says v0.28.0 and whose later commit
    says v0.29.0; returns it and the pinned commit."""
    root.mkdir()
    git(root, "init", "-q")
    (root / "pyproject.toml").write_text('[project]\nname = "vllm-musa"\n', "utf-8")
    (root / "third_party").mkdir()
    (root / "third_party" / "PINS").write_text("VLLM_TAG=v0.28.0\n", "utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "pinned")
    rev = git(root, "rev-parse", "HEAD")
    (root / "third_party" / "PINS").write_text("VLLM_TAG=v0.29.0\n", "utf-8")
    git(root, "commit", "-q", "-am", "later")
    return root, rev


def _with_git_product(tmp_path: Path, url: str, rev: str) -> Manifest:
    """The demo manifest with vllm-musa from ``url`` at ``rev`` (not a lock input: the lock
    ``stage_ready`` wrote stays current)."""
    text = MANIFEST.replace(
        "  vllm-musa: {path: demo/vllm-musa}\n", f'  vllm-musa: {{git: "{url}", rev: "{rev}"}}\n'
    )
    return manifest(tmp_path, text)


def test_a_git_product_is_read_at_its_rev_by_render_and_build(tmp_path: Path) -> None:
    _, _, lock_dir, cache = stage_ready(tmp_path)
    repo, rev = _upstream_repo(tmp_path / "upstream")
    m = _with_git_product(tmp_path, repo.as_uri(), rev)
    staged, rendered = _labels_of(tmp_path, m, lock_dir, cache)
    assert rendered == staged
    assert [line for line in staged if VLLM_TAG_LABEL in line] == [
        f'      {VLLM_TAG_LABEL}="v0.28.0" \\'  # the pinned commit's, not the branch head's
    ]


def test_a_product_that_cannot_be_read_stops_render_and_stage(tmp_path: Path) -> None:
    _, _, lock_dir, cache = stage_ready(tmp_path)
    url = (tmp_path / "gone").as_uri()
    m = _with_git_product(tmp_path, url, "0" * 40)
    where = f"sources.vllm-musa (third_party/PINS, for the label {VLLM_TAG_LABEL})"
    with pytest.raises(SourceError) as info:
        render_for(m, lock_dir, repo_root=tmp_path, cache=cache, git_cache=cache.root / "git")
    assert info.value.message.startswith(f"{where}: cannot clone {url}: ")
    assert info.value.hint == (
        "check the URL and that this machine can reach it (directly, or through --proxy URL, "
        "HTTPS_PROXY or mirrors.proxy)"
    )
    with pytest.raises(SourceError) as staging:
        _labels_of(tmp_path, m, lock_dir, cache)
    assert staging.value.message == info.value.message
    assert not (tmp_path / "build" / "context").exists()  # refused before anything is staged


def test_an_sdist_product_is_read_from_its_locked_archive(tmp_path: Path) -> None:
    text = MANIFEST.replace(
        "  vllm-musa: {path: demo/vllm-musa}\n",
        '  vllm-musa: {sdist: {index: vendor, version: "0.1.28"}}\n',
    )
    m = manifest(tmp_path, text)
    archive = write_sdist(
        tmp_path / "sdists", "vllm_musa-0.1.28.tar.gz", {"third_party/PINS": "VLLM_TAG=v0.28.0\n"}
    )
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    sdist = LockedPackage(
        name=canonicalize_name("vllm-musa"), version="0.1.28", index="vendor",
        index_url="http://127.0.0.1:8000/simple/", filename=archive.name,
        url=f"http://127.0.0.1:8000/files/{archive.name}", sha256=sha,
        size=archive.stat().st_size, kind="sdist", origin="source", required_by=(),
        group="source",
    )  # fmt: skip
    lock = lock_for(m)
    lock = dataclasses.replace(lock, packages=(*lock.packages, sdist))
    plan = plan_inputs(m, lock)
    cache = FileStore(tmp_path / "cache")
    read = functools.partial(
        read_product_pins, m, plan, repo_root=tmp_path, cache=cache, git_cache=tmp_path / "git"
    )
    with pytest.raises(ContextError) as info:  # not in the cache, and nothing may fetch it
        read()
    where = f"sources.vllm-musa (third_party/PINS, for the label {VLLM_TAG_LABEL})"
    assert info.value.message == (
        f"{where}: {archive.name} (sha256 {sha[:16]}...) is not in the cache {cache.root}"
    )
    cached = cache.file_path(sha)
    cached.parent.mkdir(parents=True)
    shutil.copyfile(archive, cached)
    assert read() == {"VLLM_TAG": "v0.28.0"}


def test_a_product_pins_that_does_not_parse_stops_the_stage(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as info:
        _staged_labels(tmp_path, "VLLM_TAG v0.28.0\n")
    assert info.value.message == (
        "sources.vllm-musa: third_party/PINS:1: 'VLLM_TAG v0.28.0' is not a KEY=VALUE line"
    )


# ------------------------------------------------------------------------------ created


def _no_commit() -> str:
    return ""


def test_created_is_source_date_epoch_when_set() -> None:
    def commit_time() -> str:
        raise AssertionError("SOURCE_DATE_EPOCH wins; git is not asked")

    epoch = source_date_epoch({"SOURCE_DATE_EPOCH": "1767225600"}, commit_time)
    assert (epoch, rfc3339(1767225600)) == (1767225600, "2026-01-01T00:00:00Z")


def test_created_is_the_commit_time_in_utc() -> None:
    epoch = source_date_epoch({}, lambda: "2026-01-02T03:04:05+02:00")
    assert epoch is not None
    assert rfc3339(epoch) == "2026-01-02T01:04:05Z"


def test_created_is_empty_without_a_commit_or_source_date_epoch() -> None:
    assert source_date_epoch({"SOURCE_DATE_EPOCH": ""}, _no_commit) is None


def test_a_bad_source_date_epoch_is_refused() -> None:
    with pytest.raises(UsageError) as info:
        source_date_epoch({"SOURCE_DATE_EPOCH": "yesterday"}, _no_commit)
    assert (
        info.value.message == "SOURCE_DATE_EPOCH='yesterday' is not a number of seconds since 1970"
    )


def _git_repo(root: Path) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_AUTHOR_DATE": "2026-03-04T05:06:07+01:00",
        "GIT_COMMITTER_DATE": "2026-03-04T05:06:07+01:00",
        "PATH": "/usr/bin:/bin",
    }
    root.mkdir(parents=True, exist_ok=True)
    for argv in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "tooling"]):
        subprocess.run(["git", *argv], cwd=root, env=env, check=True, capture_output=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_the_tooling_labels_come_from_the_tooling_commit(tmp_path: Path) -> None:
    head = _git_repo(tmp_path)
    m = manifest(tmp_path)
    args = label_args(m, Workspace(tmp_path), {}, base_image=None)
    assert args == {
        "MTGPU_TARGET": "mp_31",
        "TOOLING_REVISION": head,
        "IMAGE_CREATED": "2026-03-04T04:06:07Z",
        "DEPS_TIME": "1772597167",  # every tier's inputs are newer than the commit's time
        "SOURCES_TIME": "1772597167",
    }
    assert label_args(m, Workspace(tmp_path), {}, base_image=None) == args  # same inputs


def test_outside_git_the_tooling_labels_say_unknown(tmp_path: Path) -> None:
    args = label_args(manifest(tmp_path), Workspace(tmp_path), {}, base_image=None)
    assert (args["TOOLING_REVISION"], args["IMAGE_CREATED"]) == ("unknown", "")


# ------------------------------------------------------------------------------ no local path


def test_no_path_of_the_machine_in_the_render_labels_or_build_report(tmp_path: Path) -> None:
    """A manifest in a tmp repository with path sources: the render, the label build args and
    the build report name the stack by its path in the repository, never by tmp_path."""
    _git_repo(tmp_path)
    m, _, lock_dir, cache = stage_ready(tmp_path)
    request = ImageBuildRequest(
        stage=StageRequest(
            manifest=m,
            target="final",
            workspace=Workspace(tmp_path),
            env={},
            cache_dir=cache.root,
            lock_dir=lock_dir,
        ),
        report_path=tmp_path / "build" / "reports" / "demo-final.json",
    )
    staged = stage(request.stage)
    image = Normalized(
        image_id="sha256:" + "e" * 64,
        digest="sha256:" + "d" * 64,
        layout=tmp_path / "build" / "images" / "demo-final",
        tag="final",
        epoch=1767225600,
        dropped=(),
    )
    report = build_report(request, staged, image, gates={"imports": True})
    assert report.stack == "stack/demo.yaml"
    assert report.oci_layout == "build/images/demo-final"
    args = label_args(m, request.stage.workspace, {}, base_image=None)
    # a path of the machine as a whole path: a checkout at /w is not in /tmp/wheelhouse
    paths = (tmp_path, tmp_path.resolve(), REPO)
    machine = [*(rf"(?<![\w.-]){re.escape(str(p))}(?![\w.-])" for p in paths), "file://"]
    for what, text in (
        ("render", staged.dockerfile_text),
        ("labels", "\n".join(_label_block(staged.dockerfile_text))),
        ("build args", json.dumps(args)),
        ("build report", json.dumps(report.to_json())),
    ):
        assert [p for p in machine if re.search(p, text)] == [], what
