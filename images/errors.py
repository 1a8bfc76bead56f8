"""The image side's errors: each a ``BuildImageError`` with a short code and a hint.

The CLI (``build_image.main``) prints ``error[code]: message`` and ``hint: ...`` and maps the
exit code; nothing here prints.
"""

from __future__ import annotations

from resolver.errors import BuildImageError, ExitCode


class RenderError(BuildImageError):
    """The Dockerfile cannot be rendered from this manifest and lock, or its render drifted."""

    code = "render"


class BuildArgError(BuildImageError):
    """A build arg would be passed that no ``ARG`` declares (Docker would ignore it)."""

    code = "undeclared-build-arg"
    exit_code = ExitCode.USAGE


class CredentialError(BuildImageError):
    """A credential would end up in a build arg, a label or the image history."""

    code = "credential"
    exit_code = ExitCode.USAGE


class ContextError(BuildImageError):
    """The build context cannot be staged (a source outside the repo, a wheel missing)."""

    code = "build-context"


class SourceError(BuildImageError):
    """A git source cannot be fetched or is not at the pinned revision after checkout."""

    code = "source"


class DockerError(BuildImageError):
    """Docker is not usable: the daemon is down, BuildKit is missing, an image is absent."""

    code = "docker"


class BuildFailedError(BuildImageError):
    """``docker build`` ran and failed; the message carries the end of its output."""

    code = "build-failed"


class GateError(BuildImageError):
    """A gate refused the built image; no tag was applied."""

    code = "gate"


class FetchError(BuildImageError):
    """A build input cannot be downloaded (after the retries); the message names the URL."""

    code = "fetch-failed"


class OfflineMissingError(BuildImageError):
    """An --offline build needs an input that was not fetched; the message names it."""

    code = "offline-missing"


class KeyFingerprintError(BuildImageError):
    """An archive key does not have the fingerprint the manifest pins."""

    code = "key-fingerprint"
