"""Tag templates rendered per target and channel, and image references parsed."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ImageReferenceError, ManifestError
from images.builder.tags import TagContext, parse_reference, render_tag, render_tags
from manifest import parse_manifest
from tests.support.publishing import D1, TAGGED_STACK


def ctx(**kw: str) -> TagContext:
    base = {"release": "0.28.0", "python": "3.12", "arch": "x86_64", "date": "20261130"}
    base.update(kw)
    return TagContext(variables={"cpu": "amd64", "musa": "5.2.0"}, **base)


def test_render_release_tag_like_the_published_ones() -> None:
    assert render_tag("v{release}-{cpu}-ph1-musa{musa}", ctx()) == "v0.28.0-amd64-ph1-musa5.2.0"


def test_render_tags_selects_the_target_prefix_and_sorts() -> None:
    templates = ["vllm-openai:nightly-{date}", "vllm-openai:nightly", "final:f-{date}", "any"]
    assert render_tags(templates, target="vllm-openai", context=ctx(), kind="nightly") == [
        "any",
        "nightly",
        "nightly-20261130",
    ]
    assert render_tags(templates, target="final", context=ctx(), kind="nightly") == [
        "any",
        "f-20261130",
    ]


def test_render_tags_without_a_tag_for_the_target_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError) as exc:
        render_tags(["vllm-openai:v{release}"], target="final", context=ctx(), kind="release")
    assert exc.value.message == "image.release_tags has no tag for target 'final'"
    assert exc.value.hint == (
        "add a template such as 'final:...' (or one without a target prefix) under "
        "image.release_tags"
    )


def test_unknown_variable_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError) as exc:
        render_tag("v{release}-{gpu}", ctx())
    assert exc.value.message == "tag template 'v{release}-{gpu}': unknown variable {gpu}"
    assert exc.value.hint == (
        "known: arch, cpu, date, musa, python, release; add it under image.variables"
    )


def test_manifest_rejects_unknown_tag_variable_at_parse_time(tmp_path: Path) -> None:
    text = TAGGED_STACK.replace("musa{musa}", "musa{sdk}")
    with pytest.raises(ManifestError) as exc:
        parse_manifest(text, path=tmp_path / "s.yaml")
    assert "unknown variable {sdk}" in exc.value.message


def test_rendered_tag_must_be_a_docker_tag() -> None:
    with pytest.raises(ManifestError) as exc:
        render_tag("v{release}+{cpu}", ctx())
    assert exc.value.message == (
        "tag template 'v{release}+{cpu}' renders to 'v0.28.0+amd64', which is not a valid "
        "Docker tag"
    )


def test_bad_date_is_refused() -> None:
    with pytest.raises(ManifestError) as exc:
        render_tags(["x-{date}"], target="final", context=ctx(date="2026-11-30"), kind="nightly")
    assert exc.value.message == "tag date '2026-11-30' is not YYYYMMDD"


def test_a_tag_template_for_an_unknown_target_is_a_manifest_error() -> None:
    context = TagContext(release="0.28.0", python="3.12", arch="x86_64", date="20260101")
    with pytest.raises(ManifestError) as exc:
        render_tags(
            ["vllm-openai:v{release}", "vllm-opneai:latest"],
            target="vllm-openai",
            context=context,
            kind="release",
        )
    assert "'vllm-opneai'" in exc.value.message
    with pytest.raises(ManifestError):
        render_tags(["v{release}"], target="vllm-open", context=context, kind="release")


# ------------------------------------------------------------------------------ references


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("registry.mthreads.com/mcconline/inference/vllm:v0.28.0", "registry.mthreads.com",
         "mcconline/inference/vllm", "v0.28.0", None),
        ("127.0.0.1:5000/x/y", "127.0.0.1:5000", "x/y", None, None),
        ("localhost/y:t", "localhost", "y", "t", None),
        ("debian:bookworm-slim", "docker.io", "library/debian", "bookworm-slim", None),
        ("user/img", "docker.io", "user/img", None, None),
        (f"127.0.0.1:5000/x@{D1}", "127.0.0.1:5000", "x", None, D1),
        (f"127.0.0.1:5000/x:t@{D1}", "127.0.0.1:5000", "x", "t", D1),
    ],
)  # fmt: skip
def test_parse_reference(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )


def test_parse_reference_default_tag_and_pinned() -> None:
    ref = parse_reference("127.0.0.1:5000/x", default_tag="latest")
    assert str(ref) == "127.0.0.1:5000/x:latest"
    assert ref.pinned(D1) == f"127.0.0.1:5000/x@{D1}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "'' is not an image reference"),
        ("x@sha256:12", "'x@sha256:12': 'sha256:12' is not a sha256 digest"),
        ("127.0.0.1:5000/Upper:t", "'127.0.0.1:5000/Upper:t': repository component 'Upper' is not valid"),
        ("x:-bad", "'x:-bad': '-bad' is not a valid tag"),
    ],
)  # fmt: skip
def test_parse_reference_errors(text: str, message: str) -> None:
    with pytest.raises(ImageReferenceError) as exc:
        parse_reference(text)
    assert exc.value.message == message
