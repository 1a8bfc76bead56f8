"""One error base for the whole tool; each error carries a short code and a hint.

The command line maps these to exit codes in one place (``build_image.main``):
``ExitCode.REFUSED`` (1) when the resolver or a gate refuses, ``ExitCode.USAGE`` (2) for a
usage or manifest error (a bad flag value too: ``error[usage]``). The same boundary turns
what the machine refused into errors of their own: an ``OSError`` on a path the run cannot use
(permission, read-only, full disk, a file where a directory must be) into
``error[environment]``, exit 2; any other ``OSError`` into ``error[os]``, exit 1 (the
operation, the path and the system's reason); a ``MemoryError`` into
``error[memory]``, a ``RecursionError`` into ``error[recursion]``. Anything else is a bug:
``error[internal]``, exit 1, with what to put in a report; its traceback is printed only
under ``build_image.py -v``. Ctrl-C exits 130. No traceback ever reaches a user otherwise.
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


class TransportError(BuildImageError):
    """An HTTP exchange failed below HTTP: no connection, a timeout, a broken stream, a
    redirect loop (``core.transport``). The module that made the request re-raises it naming
    what the request was for; ``kind`` says which failure, ``name`` and ``detail`` describe it."""

    code = "transport"

    def __init__(
        self, message: str, *, kind: str, name: str, detail: str, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.kind = kind  # "connect" | "timeout" | "broken" | "redirects" | "invalid"
        self.name = name  # the failure's type, e.g. "ReadTimeoutError"
        self.detail = detail  # its short text


class UsageError(BuildImageError):
    """The command line is wrong (an unknown ``--index`` name, a bad flag value)."""

    code = "usage"
    exit_code = ExitCode.USAGE


class OSFailureError(BuildImageError):
    """The system refused an operation (an ``OSError``): a file that cannot be written, a
    directory under a file, a full disk. Made at the command line's boundary
    (``build_image.main``), naming the operation, the path(s) and the system's reason."""

    code = "os"


class EnvironmentFailureError(BuildImageError):
    """A path the run must use cannot be: permission denied, a read-only filesystem, a full
    disk, a file where a directory must be. Exit 2, like a usage error: the fix is in how the
    tool is run (another ``--cache-dir``, ``--out``), not in its inputs. The message names the
    flag that chose the path, when one did."""

    code = "environment"
    exit_code = ExitCode.USAGE


class OutOfMemoryError(BuildImageError):
    """A ``MemoryError``, turned into a message at the command line's boundary."""

    code = "memory"


class RecursionLimitError(BuildImageError):
    """A ``RecursionError``: something was nested deeper than Python's recursion limit."""

    code = "recursion"


class InternalError(BuildImageError):
    """Any other exception: a bug of the tool, reported with what a bug report needs."""

    code = "internal"


class ManifestError(BuildImageError):
    """The stack manifest is invalid; the message names the file and the key path."""

    code = "manifest"
    exit_code = ExitCode.USAGE


class IndexReadError(BuildImageError):
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


class DockerCliError(DockerError):
    """``BUILD_IMAGE_DOCKER`` names a docker CLI that is missing, not executable, or does not
    build with BuildKit: the setting is refused, never replaced by another CLI."""

    code = "docker-cli"
    exit_code = ExitCode.USAGE


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


class BuildReportError(BuildImageError):
    """A build report is missing, unreadable or not in the shape ``build`` writes."""

    code = "build-report"


# ------------------------------------------------------------------------------- serving


class ServeError(BuildImageError):
    """The server of an image did not come up, a check request failed, or its log lacks a
    pattern the profile requires (``build_image.py serve-check``)."""

    code = "serve-check"


class PreflightError(BuildImageError):
    """What must hold before an A/B or a serve-check starts a server does not: the control not
    pinned, an image missing, the device held by another process or container."""

    code = "preflight"


class AbRegressionError(BuildImageError):
    """The candidate is slower than the control beyond a threshold, or a request failed."""

    code = "ab-regression"


class ServeCheckMissingError(BuildImageError):
    """``publish --release`` of an image without a passing serve-check bundle."""

    code = "serve-check-missing"


# ---------------------------------------------------------------------------- publishing


class ImageReferenceError(BuildImageError):
    """An image reference (REPO:TAG or REPO@sha256:...) that cannot be parsed."""

    code = "reference"
    exit_code = ExitCode.USAGE


class PushError(BuildImageError):
    """``docker push`` failed, or the daemon reported no digest for a pushed tag."""

    code = "push"


class RegistryError(BuildImageError):
    """The registry answered something unexpected."""

    code = "registry"


class RegistryUnreachableError(RegistryError):
    """The registry (or its token service) cannot be reached."""

    code = "registry-unreachable"


class RegistryAuthError(RegistryError):
    """The registry refused the credentials, or asked for credentials there are none of."""

    code = "registry-auth"


class ManifestNotFoundError(RegistryError):
    """The registry has no manifest for a tag or digest."""

    code = "tag-not-found"


class RegistryCredentialsError(BuildImageError):
    """The Docker config or the environment's registry credentials are unusable."""

    code = "credentials"
    exit_code = ExitCode.USAGE


class CredentialHelperError(RegistryCredentialsError):
    """A Docker credential helper (``docker-credential-NAME``, the Docker config's
    ``credsStore`` or ``credHelpers``) is missing, failed, hung or answered something that is
    not a login; the message names the helper and the registry, never what it printed."""

    code = "credential-helper"
    exit_code = ExitCode.REFUSED


class ReleaseRecordError(BuildImageError):
    """The release record file is unreadable or not in the expected shape."""

    code = "release-record"


class RollbackError(BuildImageError):
    """There is nothing to roll back to, or the rollback target is unusable."""

    code = "rollback"


class PublishError(BuildImageError):
    """The image cannot be published (no gated build report, a push went wrong)."""

    code = "publish"


class ReleaseTagMoveError(PublishError):
    """A release tag exists in the registry with another digest; release tags never move."""

    code = "release-tag-exists"


class DigestMismatchError(PublishError):
    """The registry serves another digest for a tag than the push reported."""

    code = "digest-mismatch"


class StaleImageError(PublishError):
    """The image was built from other manifest inputs than the tags are rendered from."""

    code = "stale-image"


class DriftError(BuildImageError):
    """A published tag no longer points at the digest its release record holds."""

    code = "drift"


class NoImageSettingsError(ManifestError):
    """The manifest has no ``image:`` section, so there is nothing to tag or publish."""


class ImageLayoutError(BuildImageError):
    """An image archive or OCI layout cannot be read or written as one: a missing or corrupt
    blob, a digest that does not match its bytes, an entry that breaks the format's limits."""

    code = "image-layout"


class NotReproducedError(BuildImageError):
    """A rebuild from a record's commit and lock gave another image digest than the record's."""

    code = "not-reproduced"


# ---------------------------------------------------------------------------- network bounds


class DeadlineError(BuildImageError):
    """The command's network work did not finish within its ``--deadline`` (``core.transport``);
    the message names the request that was cut off."""

    code = "deadline"
