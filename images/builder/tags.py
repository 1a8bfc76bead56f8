"""Tag templates and image references: pure text <-> model, no I/O.

A tag template (``image.release_tags`` / ``image.nightly_tags``) is ``TARGET:TEMPLATE`` (only
for that build target, e.g. ``vllm-openai:v{release}-{cpu}``) or a bare ``TEMPLATE`` (every
target). ``{release}``, ``{python}``, ``{arch}`` and ``{date}`` are built in; every other field
comes from ``image.variables``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from core.digests import is_digest
from core.errors import ImageReferenceError, ManifestError
from manifest import TAG_FIELD_RE, TAG_FIELDS, TARGETS

Channel = Literal["release", "nightly"]

# docker/distribution reference grammar
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_DATE_RE = re.compile(r"^\d{8}$")
DOCKER_HUB = "docker.io"


@dataclass(frozen=True, kw_only=True)
class TagContext:
    """The values a tag template may use."""

    release: str
    python: str
    arch: str
    date: str  # YYYYMMDD (UTC), chosen by the caller
    variables: Mapping[str, str] = field(default_factory=dict)

    def values(self) -> dict[str, str]:
        """``variables`` and the built-in fields (``TAG_FIELDS``), which no variable may name."""
        return {**self.variables, **{name: getattr(self, name) for name in TAG_FIELDS}}


@dataclass(frozen=True, kw_only=True)
class ImageReference:
    """``registry/repository[:tag][@digest]`` split into its parts (Docker's normalization)."""

    registry: str  # host[:port]; "docker.io" for Docker Hub
    repository: str  # the path inside the registry, e.g. "mcconline/inference/vllm"
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """``registry/repository`` as Docker writes it."""
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """What the registry API takes after ``/manifests/``: the digest, else the tag."""
        ref = self.digest or self.tag
        if ref is None:
            raise ImageReferenceError(f"{self.name}: no tag or digest")
        return ref

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        return f"{self.name}{tag}@{self.digest}" if self.digest else f"{self.name}{tag}"

    def with_tag(self, tag: str) -> ImageReference:
        return ImageReference(registry=self.registry, repository=self.repository, tag=tag)

    def pinned(self, digest: str) -> str:
        return f"{self.name}@{digest}"


def parse_reference(text: str, *, default_tag: str | None = None) -> ImageReference:
    """Parse ``[registry/]repo[:tag][@sha256:...]`` like Docker does."""
    rest = text.strip()
    if not rest or any(c.isspace() for c in rest):
        raise ImageReferenceError(
            f"{text!r} is not an image reference", hint="write REPO:TAG or REPO@sha256:..."
        )
    digest = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not is_digest(digest):
            raise ImageReferenceError(
                f"{text!r}: {digest!r} is not a sha256 digest",
                hint="a digest is sha256: followed by 64 lowercase hex digits",
            )
    tag = None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG_RE.match(tag):
            raise ImageReferenceError(f"{text!r}: {tag!r} is not a valid tag")
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
        if "/" not in path:
            path = f"library/{path}"
    for component in path.split("/"):
        if not _COMPONENT_RE.match(component):
            raise ImageReferenceError(
                f"{text!r}: repository component {component!r} is not valid",
                hint="repository names are lowercase letters, digits and . _ - separators",
            )
    if tag is None and digest is None:
        tag = default_tag
    return ImageReference(registry=registry, repository=path, tag=tag, digest=digest)


def render_tag(template: str, context: TagContext) -> str:
    """Fill ``{field}``s; an unknown field or an invalid result is a manifest error."""
    values = context.values()
    unknown = [f for f in TAG_FIELD_RE.findall(template) if f not in values]
    if unknown:
        raise ManifestError(
            f"tag template {template!r}: unknown variable {{{unknown[0]}}}",
            hint=f"known: {', '.join(sorted(values))}; add it under image.variables",
        )
    tag = TAG_FIELD_RE.sub(lambda m: values[m.group(1)], template)
    if not _TAG_RE.match(tag):
        raise ManifestError(
            f"tag template {template!r} renders to {tag!r}, which is not a valid Docker tag",
            hint="a tag is at most 128 letters, digits, '_', '.' and '-', not starting with . or -",
        )
    return tag


def render_tags(
    templates: Sequence[str],
    *,
    target: str,
    context: TagContext,
    kind: str,
    targets: Sequence[str] = TARGETS,
) -> list[str]:
    """The tags (sorted, unique) of ``templates`` that apply to ``target``.

    A template prefixed with a name that is not one of ``targets`` (a typo) is an error, not a
    template that silently never applies.
    """
    if not _DATE_RE.match(context.date):
        raise ManifestError(f"tag date {context.date!r} is not YYYYMMDD")
    if target not in targets:
        raise ManifestError(
            f"build target {target!r} is not one of {', '.join(targets)}",
            hint="publish the target `build_image.py build --target` built",
        )
    out: set[str] = set()
    for template in templates:
        prefix, sep, rest = template.partition(":")  # "vllm-openai:v{release}", or no target
        for_target, body = (prefix, rest) if sep else (None, template)
        if for_target is not None and for_target not in targets:
            raise ManifestError(
                f"image.{kind}_tags: {template!r} is for target {for_target!r}, which is not "
                f"one of {', '.join(targets)}; it would never be applied",
                hint="write TARGET:TEMPLATE with a build target, or TEMPLATE for every target",
            )
        if for_target is not None and for_target != target:
            continue
        out.add(render_tag(body, context))
    if not out:
        raise ManifestError(
            f"image.{kind}_tags has no tag for target {target!r}",
            hint=f"add a template such as '{target}:...' (or one without a target prefix) "
            f"under image.{kind}_tags",
        )
    return sorted(out)
