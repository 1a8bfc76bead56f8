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
    """Base of every error this tool reports to a user. A subclass states its short code and,
    when not ``REFUSED``, its exit code in its header: ``class UsageError(BuildImageError,
    code="usage", exit_code=ExitCode.USAGE)``; a subclass without a code keeps its base's."""

    code = "build-image-error"
    exit_code = ExitCode.REFUSED

    def __init_subclass__(cls, *, code: str = "", exit_code: ExitCode | None = None) -> None:
        super().__init_subclass__()
        if code:
            cls.code = code
        if exit_code is not None:
            cls.exit_code = exit_code

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class TransportError(BuildImageError, code="transport"):
    """An HTTP exchange failed below HTTP: no connection, a timeout, a broken stream, a
    redirect loop (``core.transport``). The module that made the request re-raises it naming
    what the request was for; ``kind`` says which failure, ``name`` and ``detail`` describe it."""

    def __init__(
        self, message: str, *, kind: str, name: str, detail: str, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.kind = kind  # "connect" | "timeout" | "broken" | "redirects" | "invalid"
        self.name = name  # the failure's type, e.g. "ReadTimeoutError"
        self.detail = detail  # its short text


class UsageError(BuildImageError, code="usage", exit_code=ExitCode.USAGE):
    """The command line is wrong (an unknown ``--index`` name, a bad flag value)."""


class OSFailureError(BuildImageError, code="os"):
    """The system refused an operation (an ``OSError``): a file that cannot be written, a
    directory under a file, a full disk. Made at the command line's boundary
    (``build_image.main``), naming the operation, the path(s) and the system's reason."""


class EnvironmentFailureError(BuildImageError, code="environment", exit_code=ExitCode.USAGE):
    """A path the run must use cannot be: permission denied, a read-only filesystem, a full
    disk, a file where a directory must be. Exit 2, like a usage error: the fix is in how the
    tool is run (another ``--cache-dir``, ``--out``), not in its inputs. The message names the
    flag that chose the path, when one did."""


class OutOfMemoryError(BuildImageError, code="memory"):
    """A ``MemoryError``, turned into a message at the command line's boundary."""


class RecursionLimitError(BuildImageError, code="recursion"):
    """A ``RecursionError``: something was nested deeper than Python's recursion limit."""


class InternalError(BuildImageError, code="internal"):
    """Any other exception: a bug of the tool, reported with what a bug report needs."""


class ManifestError(BuildImageError, code="manifest", exit_code=ExitCode.USAGE):
    """The stack manifest is invalid; the message names the file and the key path."""


class IndexReadError(BuildImageError, code="index"):
    """An index could not be read (network fault, HTTP error, 404 on a bound index)."""


class ResolutionError(BuildImageError, code="resolution"):
    """No acceptable wheel, a rule violated, a dependency a pin does not satisfy."""


class HashMismatchError(BuildImageError, code="hash-mismatch"):
    """The bytes of a file do not match the hash the index or the lock gives."""


class MetadataError(BuildImageError, code="metadata"):
    """A wheel's METADATA is missing, unreadable, or disagrees with its filename."""


class LockError(BuildImageError, code="lock"):
    """The lock on disk is missing, unreadable, stale, or differs from a fresh resolve."""


class RenderError(BuildImageError, code="render"):
    """The Dockerfile cannot be rendered from this manifest and lock, or its render drifted."""


class BuildArgError(BuildImageError, code="undeclared-build-arg", exit_code=ExitCode.USAGE):
    """A build arg would be passed that no ``ARG`` declares (Docker would ignore it)."""


class CredentialError(BuildImageError, code="credential", exit_code=ExitCode.USAGE):
    """A credential would end up in a build arg, a label or the image history."""


class ContextError(BuildImageError, code="build-context"):
    """The build context cannot be staged (a source outside the repo, a wheel missing)."""


class SourceError(BuildImageError, code="source"):
    """A git source cannot be fetched or is not at the pinned revision after checkout."""


class DockerError(BuildImageError, code="docker"):
    """Docker is not usable: the daemon is down, BuildKit is missing, an image is absent."""


class DockerCliError(DockerError, code="docker-cli", exit_code=ExitCode.USAGE):
    """``BUILD_IMAGE_DOCKER`` names a docker CLI that is missing, not executable, or does not
    build with BuildKit: the setting is refused, never replaced by another CLI."""


class BuildFailedError(BuildImageError, code="build-failed"):
    """``docker build`` ran and failed; the message carries the end of its output."""


class GateError(BuildImageError, code="gate"):
    """A gate refused the built image; no tag was applied."""


class FetchError(BuildImageError, code="fetch-failed"):
    """A build input cannot be downloaded (after the retries); the message names the URL."""


class OfflineMissingError(BuildImageError, code="offline-missing"):
    """An --offline build needs an input that was not fetched; the message names it."""


class KeyFingerprintError(BuildImageError, code="key-fingerprint"):
    """An archive key does not have the fingerprint the manifest pins."""


class BuildReportError(BuildImageError, code="build-report"):
    """A build report is missing, unreadable or not in the shape ``build`` writes."""


# ------------------------------------------------------------------------------- serving


class ServeError(BuildImageError, code="serve-check"):
    """The server of an image did not come up, a check request failed, or its log lacks a
    pattern the profile requires (``build_image.py serve-check``)."""


class PreflightError(BuildImageError, code="preflight"):
    """What must hold before an A/B or a serve-check starts a server does not: the control not
    pinned, an image missing, the device held by another process or container."""


class AbRegressionError(BuildImageError, code="ab-regression"):
    """The candidate is slower than the control beyond a threshold, or a request failed."""


class ServeCheckMissingError(BuildImageError, code="serve-check-missing"):
    """``publish --release`` of an image without a passing serve-check bundle."""


# ---------------------------------------------------------------------------- publishing


class ImageReferenceError(BuildImageError, code="reference", exit_code=ExitCode.USAGE):
    """An image reference (REPO:TAG or REPO@sha256:...) that cannot be parsed."""


class PushError(BuildImageError, code="push"):
    """``docker push`` failed, or the daemon reported no digest for a pushed tag."""


class RegistryError(BuildImageError, code="registry"):
    """The registry answered something unexpected."""


class RegistryUnreachableError(RegistryError, code="registry-unreachable"):
    """The registry (or its token service) cannot be reached."""


class RegistryAuthError(RegistryError, code="registry-auth"):
    """The registry refused the credentials, or asked for credentials there are none of."""


class ManifestNotFoundError(RegistryError, code="tag-not-found"):
    """The registry has no manifest for a tag or digest."""


class RegistryCredentialsError(BuildImageError, code="credentials", exit_code=ExitCode.USAGE):
    """The Docker config or the environment's registry credentials are unusable."""


class CredentialHelperError(
    RegistryCredentialsError, code="credential-helper", exit_code=ExitCode.REFUSED
):
    """A Docker credential helper (``docker-credential-NAME``, the Docker config's
    ``credsStore`` or ``credHelpers``) is missing, failed, hung or answered something that is
    not a login; the message names the helper and the registry, never what it printed."""


class ReleaseRecordError(BuildImageError, code="release-record"):
    """The release record file is unreadable or not in the expected shape."""


class RollbackError(BuildImageError, code="rollback"):
    """There is nothing to roll back to, or the rollback target is unusable."""


class PublishError(BuildImageError, code="publish"):
    """The image cannot be published (no gated build report, a push went wrong)."""


class ReleaseTagMoveError(PublishError, code="release-tag-exists"):
    """A release tag exists in the registry with another digest; release tags never move."""


class DigestMismatchError(PublishError, code="digest-mismatch"):
    """The registry serves another digest for a tag than the push reported."""


class StaleImageError(PublishError, code="stale-image"):
    """The image was built from other manifest inputs than the tags are rendered from."""


class SigningKeyError(BuildImageError, code="signing-key", exit_code=ExitCode.USAGE):
    """A signing or public key cannot be used: unreadable, in no format this tool reads, the
    wrong passphrase, an algorithm cosign does not sign with. The message names the file and
    why, never the key or the passphrase."""


class SignatureError(BuildImageError, code="signature"):
    """A signature, an attestation or a provenance does not verify: another key signed it, it
    is missing, it names another digest, or its provenance records another lock. The message
    names what failed and for which image."""


class AttestationError(BuildImageError, code="attestation"):
    """A provenance or an attached document cannot be made or read: a build input it must
    record is missing, or a document read back is not in the expected shape."""


class DriftError(BuildImageError, code="drift"):
    """A published tag no longer points at the digest its release record holds."""


class NoImageSettingsError(ManifestError):
    """The manifest has no ``image:`` section, so there is nothing to tag or publish."""


class ImageLayoutError(BuildImageError, code="image-layout"):
    """An image archive or OCI layout cannot be read or written as one: a missing or corrupt
    blob, a digest that does not match its bytes, an entry that breaks the format's limits."""


class NotReproducedError(BuildImageError, code="not-reproduced"):
    """A rebuild from a record's commit and lock gave another image digest than the record's."""


# ---------------------------------------------------------------------------- network bounds


class DeadlineError(BuildImageError, code="deadline"):
    """The command's network work did not finish within its ``--deadline`` (``core.transport``);
    the message names the request that was cut off."""
