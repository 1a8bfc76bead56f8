"""One error base for the whole tool; each error carries a short code and a hint.

The command line maps these to exit codes in one place (``build_image.main``):
``ExitCode.REFUSED`` (1) when the resolver or a gate refuses, ``ExitCode.USAGE`` (2) for a
usage or manifest error. Anything that is not a ``BuildImageError`` is a bug and shows its
traceback.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    REFUSED = 1
    USAGE = 2


class BuildImageError(Exception):
    """Base of every error this tool reports to a user."""

    code = "build-image-error"
    exit_code = ExitCode.REFUSED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(BuildImageError):
    """The command line is wrong (an unknown ``--index`` name, a bad flag value)."""

    code = "usage"
    exit_code = ExitCode.USAGE


class ManifestError(BuildImageError):
    """The stack manifest is invalid; the message names the file and the key path."""

    code = "manifest"
    exit_code = ExitCode.USAGE


class IndexError_(BuildImageError):
    """An index could not be read (network fault, HTTP error, 404 on a bound index)."""

    code = "index"


class ResolutionError(BuildImageError):
    """No acceptable wheel, a rule violated, a dependency a pin does not satisfy."""

    code = "resolution"


class HashMismatchError(BuildImageError):
    """The bytes of a file do not match the hash the index or the lock gives."""

    code = "hash-mismatch"


class MetadataError(BuildImageError):
    """A wheel's METADATA is missing, unreadable, or disagrees with its filename."""

    code = "metadata"


class LockError(BuildImageError):
    """The lock on disk is missing, unreadable, stale, or differs from a fresh resolve."""

    code = "lock"


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
