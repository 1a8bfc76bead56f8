"""The registry HTTP API client (OCI distribution / Docker registry v2): the one module that
talks HTTP to registries (through ``core.transport``).

It resolves a tag to the digest the registry serves (HEAD on ``/v2/<name>/manifests/<ref>``
with explicit Accept headers; GET and sha256 of the body when the registry gives no
``Docker-Content-Digest``), fetches a manifest by digest, and PUTs a manifest under a tag. Of
blobs, it asks whether a repository has one (HEAD on ``/v2/<name>/blobs/<digest>``) and mounts
one from another repository of the same registry (``POST .../blobs/uploads/?mount=&from=``),
so that a publish uploads only what the registry does not have.
Authentication: Basic, or the Bearer token flow (``WWW-Authenticate: Bearer realm=...``).
Credentials come from the environment or the Docker config, its credential helpers
included (``find_credentials`` says in which order; the environment and the config's path
are read once by the caller and passed in), never from the manifest, and every message is
redacted. They are sent to the
registry's own origin (and the Basic password to its token service, over https or loopback
http only), never to another host a redirect names. Plain http is used only for loopback
registries (127.0.0.0/8, ::1, localhost); every other registry is https.

Every exchange is bounded: ``timeout`` per connect and read, the command's network deadline
(``--deadline``, a ``core.transport.Deadline`` shared by every registry of the command) for
the exchange as a whole, and ``MAX_BODY`` bytes of answer (a manifest or a token). Connection
failures, 429 and 5xx are retried ``retries`` times (``--retries``) by the transport's
policy, the one the index client uses: backoff from 0.5 s, doubling, or the answer's numeric
``Retry-After`` (at most 30 s), every wait inside the deadline. Only ``IDEMPOTENT`` methods are
retried; a manifest PUT is one (the same bytes under the same tag).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urljoin, urlsplit

from core.closing import Closing
from core.digests import is_digest
from core.errors import (
    DeadlineError,
    ManifestNotFoundError,
    RegistryAuthError,
    RegistryCredentialsError,
    RegistryError,
    RegistryUnreachableError,
    TransportError,
)
from core.network import DIRECT, NetworkConfig, is_loopback
from core.transport import (
    NO_RETRY,
    RETRY_STATUSES,
    Deadline,
    OriginAuth,
    Response,
    RetryPolicy,
    Transport,
    basic_auth,
)
from images.builder.tags import DOCKER_HUB, ImageReference
from images.engine.docker_login import find_docker_login

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
ACCEPT = ", ".join(MANIFEST_TYPES)
MAX_BODY = 4 << 20  # a manifest (registries refuse bigger ones) or a token answer

ENV_USER = "BUILD_IMAGE_REGISTRY_USER"
ENV_PASSWORD = "BUILD_IMAGE_REGISTRY_PASSWORD"  # noqa: S105 - the variable's name, not a secret
ENV_HOST = "BUILD_IMAGE_REGISTRY_HOST"  # the one registry the environment's credentials are for
LOGIN_HINT = (
    f"credentials come from {ENV_USER} and {ENV_PASSWORD} (for the host {ENV_HOST} names), "
    "else from the Docker config: its credential helper for the host (credHelpers, else "
    "credsStore), else its auths (`docker login REGISTRY`); never from the manifest"
)
DEFAULT_RETRIES = 3  # --retries
DEFAULT_HELPER_TIMEOUT = 30.0  # seconds a credential helper may take (--timeout)
# Retried on 429, 5xx and connection failures: GET and HEAD, and PUT, which is idempotent here
# (a manifest PUT under a tag: sent twice, the tag holds the same digest). A POST (a blob
# upload session) would not be retried: each one opens another session.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT"})
_CHALLENGE_PARAM_RE = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


# ------------------------------------------------------------------------------ credentials


@dataclass(frozen=True, kw_only=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str  # where they came from, for messages ("the environment", "~/.docker/config.json")

    def secrets(self) -> tuple[str, ...]:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return tuple(s for s in (self.password, token) if s)


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def default_docker_config(env: Mapping[str, str], home: Path) -> Path:
    config_dir = env.get("DOCKER_CONFIG")
    return (Path(config_dir) if config_dir else home / ".docker") / "config.json"


def find_credentials(
    registry: str,
    *,
    env: Mapping[str, str],
    docker_config: Path | None,
    timeout: float = DEFAULT_HELPER_TIMEOUT,
) -> Credentials | None:
    """The credentials for ``registry``, in this order (None means anonymous):

    1. ``BUILD_IMAGE_REGISTRY_USER``/``_PASSWORD``, for the registry named by
       ``BUILD_IMAGE_REGISTRY_HOST`` only (a `pin REF` of another host never gets them);
    2. the Docker config as the docker CLI reads it
       (``images.engine.docker_login.find_docker_login``):
       the credential helper of ``credHelpers`` for this host, else of ``credsStore``
       (``docker-credential-NAME``, run for at most ``timeout`` seconds and asked for this
       host only), then the ``auths`` entry of this host."""
    user, password = env.get(ENV_USER), env.get(ENV_PASSWORD)
    if user or password:
        if not (user and password):
            raise RegistryCredentialsError(
                f"only one of {ENV_USER} and {ENV_PASSWORD} is set", hint="set both, or neither"
            )
        host = env.get(ENV_HOST, "").strip()
        if not host:
            raise RegistryCredentialsError(
                f"{ENV_USER}/{ENV_PASSWORD} are set but {ENV_HOST} is not",
                hint=f"set {ENV_HOST} to the registry they are for (e.g. registry.mthreads.com); "
                "they are never sent to any other host",
            )
        if host == registry:
            return Credentials(
                username=user, password=password, source=f"{ENV_USER}/{ENV_PASSWORD}"
            )
    if docker_config is None:
        return None
    login = find_docker_login(registry, config_file=docker_config, env=env, timeout=timeout)
    if login is None:
        return None
    return Credentials(username=login.username, password=login.password, source=login.source)


# ------------------------------------------------------------------------------ pure parts


@dataclass(frozen=True, kw_only=True)
class Challenge:
    scheme: str  # "bearer" | "basic" | other, lowercased
    params: Mapping[str, str]


def parse_challenge(header: str) -> Challenge:
    scheme, _, rest = header.strip().partition(" ")
    return Challenge(scheme=scheme.lower(), params=dict(_CHALLENGE_PARAM_RE.findall(rest)))


def _check_realm(registry: str, realm: str) -> None:
    """The token service gets the password: https only, except on a loopback host."""
    parts = urlsplit(realm)
    host = parts.hostname or ""
    if parts.scheme == "https" and host:
        return
    if parts.scheme == "http" and host and is_loopback(f"[{host}]" if ":" in host else host):
        return
    raise RegistryError(
        f"the registry {registry} sends its token requests to {realm!r}, which is not an "
        "https:// URL (or plain http on a loopback host); the credentials would travel "
        "in clear text, so none were sent",
        hint="fix the registry's token service (auth.token.realm) to use https",
    )


def sha256_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass(frozen=True, kw_only=True)
class PlatformManifest:
    digest: str
    platform: str  # "linux/amd64", "linux/arm64/v8", "unknown/unknown" (attestations)


@dataclass(frozen=True, kw_only=True)
class ManifestInfo:
    digest: str
    media_type: str
    platforms: tuple[PlatformManifest, ...] = ()  # for an index

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES


def parse_index(body: bytes) -> tuple[PlatformManifest, ...]:
    doc = json.loads(body)
    out = []
    for m in doc.get("manifests", []):
        p = m.get("platform") or {}
        parts = [p.get("os", "unknown"), p.get("architecture", "unknown")]
        if p.get("variant"):
            parts.append(p["variant"])
        out.append(PlatformManifest(digest=m["digest"], platform="/".join(parts)))
    return tuple(out)


def _error_detail(response: Response) -> str:
    try:
        doc = response.json()
        errors = doc.get("errors") or []
        if errors:
            return "; ".join(f"{e.get('code', '?')}: {e.get('message', '')}" for e in errors)
    except (ValueError, AttributeError):
        pass
    return response.reason or ""


# ------------------------------------------------------------------------------ the client


@dataclass(frozen=True, kw_only=True)
class FetchedManifest:
    body: bytes
    media_type: str
    digest: str


class RegistryClient(Closing):
    """One registry host. Reuse it: tokens are cached per scope."""

    def __init__(
        self,
        registry: str,
        *,
        credentials: Credentials | None = None,
        timeout: float = 30.0,
        retries: int = DEFAULT_RETRIES,
        deadline: Deadline | None = None,
        network: NetworkConfig = DIRECT,
    ) -> None:
        self.registry = registry
        host = "registry-1.docker.io" if registry == DOCKER_HUB else registry
        self.base = f"{'http' if is_loopback(registry) else 'https'}://{host}"
        self.credentials = credentials
        self.timeout = timeout
        self.retries = retries
        # the index client's policy: backoff 0.5 s doubling, or the answer's Retry-After
        self._retry = RetryPolicy(attempts=max(1, retries + 1))
        # the command's proxies and trust store (core.network); never a .netrc
        self._http = Transport(timeout=timeout, deadline=deadline, network=network)
        self._auth: dict[str, str] = {}

    def close(self) -> None:
        self._http.close()

    # -- low level

    def _secrets(self) -> tuple[str, ...]:
        return self.credentials.secrets() if self.credentials else ()

    def _who(self) -> str:
        if self.credentials is None:
            return "anonymously"
        return f"as user {self.credentials.username!r} (from {self.credentials.source})"

    def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        *,
        data: bytes | None = None,
        auth: OriginAuth | None = None,
        params: Iterable[tuple[str, str]] = (),
    ) -> Response:
        """One exchange, read whole (manifests and tokens are small), retried per ``IDEMPOTENT``
        on connection failures, 429 and 5xx; such an answer after the last attempt is returned
        (``_gave_up`` names it). ``params``: the query, a name may repeat (``scope``)."""
        retry = self._retry if method in IDEMPOTENT else NO_RETRY
        tries = self._attempts(method)
        query = urlencode(list(params))
        target = f"{url}{'&' if '?' in url else '?'}{query}" if query else url
        try:
            with self._http.request(
                method,
                target,
                headers=headers,
                body=data,
                auth=auth,
                retry=retry,
                max_body=MAX_BODY,
            ) as response:
                _ = response.content
                return response
        except DeadlineError as exc:
            raise DeadlineError(
                redact(f"the registry {self.registry}: {exc.message}", self._secrets()),
                hint=exc.hint,
            ) from None
        except TransportError as exc:
            if exc.kind == "timeout":
                raise RegistryUnreachableError(
                    f"the registry {self.registry} did not answer within {self.timeout:g}s "
                    f"({url}, {tries})",
                    hint="retry, or raise --timeout",
                ) from None
            if exc.kind in ("connect", "broken"):
                reason = "connection refused" if "refused" in exc.detail.lower() else exc.name
                raise RegistryUnreachableError(
                    f"cannot reach the registry {self.registry} at {self.base} ({reason}, {tries})",
                    hint="is the registry running and the repository right? "
                    "(image.repository in the manifest, or --repository)",
                ) from None
            raise RegistryError(redact(f"{method} {url}: {exc.detail}", self._secrets())) from None

    def _attempts(self, method: str) -> str:
        n = self._retry.attempts if method in IDEMPOTENT else 1
        return f"{n} attempt{'s' if n != 1 else ''}"

    def _gave_up(self, method: str, url: str, r: Response, *, who: str) -> RegistryError:
        """A 429 or 5xx answer after the last attempt."""
        detail = _error_detail(r)
        answer = f"HTTP {r.status} {detail}" if detail else f"HTTP {r.status}"
        return RegistryUnreachableError(
            redact(
                f"{who}: {method} {url} failed after {self._attempts(method)} ({answer})",
                self._secrets(),
            ),
            hint="it answered 429 (too many requests) or a server error each time; retry "
            f"later, or raise --retries (now {self.retries})",
        )

    def _authorize(self, challenge: Challenge, scope: str) -> str:
        creds = self.credentials
        if challenge.scheme == "basic":
            if creds is None:
                raise RegistryAuthError(
                    f"the registry {self.registry} requires a login and no credentials were "
                    f"found for it",
                    hint=LOGIN_HINT,
                )
            token = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
            return f"Basic {token}"
        if challenge.scheme == "bearer":
            realm = challenge.params.get("realm")
            if not realm:
                raise RegistryError(
                    f"the registry {self.registry} sent a Bearer challenge without a realm"
                )
            _check_realm(self.registry, realm)
            # one scope parameter per scope the challenge names, space-separated (a mount
            # needs push on its repository and pull on the one it mounts from)
            params = [("scope", s) for s in challenge.params.get("scope", scope).split()]
            if "service" in challenge.params:
                params.append(("service", challenge.params["service"]))
            auth = None
            if creds is not None:  # to the token service's own origin only
                token = basic_auth(creds.username, creds.password)
                auth = OriginAuth(origin=realm, headers={"Authorization": token})
            try:
                r = self._send("GET", realm, {}, auth=auth, params=params)
            except RegistryUnreachableError:
                raise RegistryUnreachableError(
                    f"cannot reach the token service {realm} of the registry {self.registry}",
                    hint="the registry answers, its token service (WWW-Authenticate realm) "
                    "does not: check that host, or the registry's auth.token.realm",
                ) from None
            if r.status in (401, 403):
                raise self._refused(r)
            if r.status in RETRY_STATUSES:
                raise self._gave_up("GET", realm, r, who=f"the token service of {self.registry}")
            if r.status != 200:
                raise RegistryError(
                    redact(
                        f"the token service {realm} answered HTTP {r.status} {_error_detail(r)}",
                        self._secrets(),
                    )
                )
            bearer: object = None
            with contextlib.suppress(ValueError):
                doc = r.json()
                bearer = doc.get("token") or doc.get("access_token")
            if not isinstance(bearer, str) or not bearer:
                raise RegistryError(f"the token service {realm} sent no token")
            return f"Bearer {bearer}"
        raise RegistryError(
            f"the registry {self.registry} asks for {challenge.scheme or 'an unnamed'} "
            "authentication; only Basic and Bearer are supported"
        )

    def _refused(self, response: Response) -> RegistryAuthError:
        if self.credentials is None:
            return RegistryAuthError(
                f"the registry {self.registry} requires a login and no credentials were found "
                f"for it (HTTP {response.status})",
                hint=LOGIN_HINT,
            )
        return RegistryAuthError(
            f"the registry {self.registry} refused the credentials of user "
            f"{self.credentials.username!r} (from {self.credentials.source}): "
            f"HTTP {response.status}",
            hint="check the user and password; " + LOGIN_HINT,
        )

    def _request(
        self,
        method: str,
        repository: str,
        path: str,
        *,
        headers: Mapping[str, str],
        push: bool = False,
        data: bytes | None = None,
        pull_from: str | None = None,
    ) -> Response:
        """``method`` on ``/v2/<repository>/<path>``, authorized for pull (and ``push``) on
        ``repository``, and for pull on ``pull_from`` too (a mount's source)."""
        scope = f"repository:{repository}:{'pull,push' if push else 'pull'}"
        if pull_from is not None:
            scope += f" repository:{pull_from}:pull"
        url = f"{self.base}/v2/{repository}/{path}"
        return self._exchange(method, url, repository, scope, headers=headers, data=data)

    def _exchange(
        self,
        method: str,
        url: str,
        repository: str,
        scope: str,
        *,
        headers: Mapping[str, str],
        data: bytes | None = None,
    ) -> Response:
        """One request to the registry with the Authorization of ``scope``, got on a 401."""
        r = self._send(method, url, headers, data=data, auth=self._registry_auth(scope))
        if r.status == 401:
            challenge = parse_challenge(r.headers.get("WWW-Authenticate", ""))
            self._auth[scope] = self._authorize(challenge, scope)
            r = self._send(method, url, headers, data=data, auth=self._registry_auth(scope))
            if r.status == 401:
                raise self._refused(r)
        if r.status in RETRY_STATUSES and method in IDEMPOTENT:
            raise self._gave_up(method, url, r, who=f"the registry {self.registry}")
        if r.status == 403:
            raise RegistryAuthError(
                f"the registry {self.registry} denies {method} on {repository} {self._who()} "
                "(HTTP 403)",
                hint="the account needs pull (and, to publish, push) rights on the repository",
            )
        return r

    def _registry_auth(self, scope: str) -> OriginAuth | None:
        """The scope's Authorization, for the registry's own origin only."""
        if scope not in self._auth:
            return None
        return OriginAuth(origin=self.base, headers={"Authorization": self._auth[scope]})

    def _unexpected(self, method: str, what: str, r: Response) -> RegistryError:
        return RegistryError(
            redact(
                f"{method} {what} on {self.registry}: HTTP {r.status} {_error_detail(r)}",
                self._secrets(),
            )
        )

    # -- manifests

    def lookup(self, repository: str, reference: str) -> ManifestInfo | None:
        """The digest the registry serves for a tag or digest; None when it has none."""
        path = f"manifests/{reference}"
        r = self._request("HEAD", repository, path, headers={"Accept": ACCEPT})
        if r.status == 404:
            return None
        if r.status != 200:
            raise self._unexpected("HEAD", f"{repository}:{reference}", r)
        digest = r.headers.get("Docker-Content-Digest", "")
        media_type = r.headers.get("Content-Type", "").split(";")[0].strip()
        if not is_digest(digest) or media_type in INDEX_TYPES:
            fetched = self.fetch(repository, reference)
            if fetched is None:
                return None
            platforms = parse_index(fetched.body) if fetched.media_type in INDEX_TYPES else ()
            return ManifestInfo(
                digest=fetched.digest, media_type=fetched.media_type, platforms=platforms
            )
        return ManifestInfo(digest=digest, media_type=media_type)

    def fetch(self, repository: str, reference: str) -> FetchedManifest | None:
        """GET a manifest; the digest is the sha256 of the bytes (checked against a digest ref)."""
        r = self._request("GET", repository, f"manifests/{reference}", headers={"Accept": ACCEPT})
        if r.status == 404:
            return None
        if r.status != 200:
            raise self._unexpected("GET", f"{repository}:{reference}", r)
        body = r.content
        digest = sha256_digest(body)
        if is_digest(reference) and digest != reference:
            raise RegistryError(
                f"{self.registry}/{repository}@{reference}: the registry sent a manifest whose "
                f"sha256 is {digest}",
                hint="the registry or a proxy in between alters manifests; do not trust it",
            )
        served = r.headers.get("Docker-Content-Digest")
        if served and served != digest and not is_digest(reference):
            raise RegistryError(
                f"{self.registry}/{repository}:{reference}: Docker-Content-Digest {served} does "
                f"not match the sha256 of the manifest body {digest}"
            )
        media_type = r.headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in MANIFEST_TYPES:
            with contextlib.suppress(ValueError):
                media_type = str(json.loads(body).get("mediaType", media_type))
        return FetchedManifest(body=body, media_type=media_type, digest=digest)

    def require(self, ref: ImageReference) -> ManifestInfo:
        info = self.lookup(ref.repository, ref.reference)
        if info is None:
            what = "digest" if ref.digest else "tag"
            raise ManifestNotFoundError(
                f"{ref}: the registry has no such {what}",
                hint="check the spelling (`skopeo list-tags --tls-verify=false "
                f"docker://{ref.name}` lists the tags)",
            )
        return info

    def put(self, repository: str, tag: str, manifest: FetchedManifest) -> str:
        """PUT a manifest under ``tag``; returns the digest the registry reports (checked)."""
        r = self._request(
            "PUT",
            repository,
            f"manifests/{tag}",
            headers={"Content-Type": manifest.media_type},
            data=manifest.body,
            push=True,
        )
        if r.status not in (200, 201):
            raise self._unexpected("PUT", f"{repository}:{tag}", r)
        served = r.headers.get("Docker-Content-Digest", manifest.digest)
        if served != manifest.digest:
            raise RegistryError(
                f"{self.registry}/{repository}:{tag}: the registry stored digest {served}, "
                f"expected {manifest.digest}"
            )
        return served

    # -- blobs

    def blob_exists(self, repository: str, digest: str) -> bool:
        """Whether ``repository`` has the blob ``digest`` (HEAD: 200 yes, 404 no)."""
        r = self._request("HEAD", repository, f"blobs/{digest}", headers={})
        if r.status == 404:
            return False
        if r.status != 200:
            raise self._unexpected("HEAD", f"{repository}@{digest}", r)
        return True

    def mount_blob(self, repository: str, digest: str, source_repository: str) -> bool:
        """Mount the blob ``digest`` of ``source_repository`` into ``repository`` (the same
        registry), with no bytes sent: True when mounted (201). False when the registry
        declined (202: it opened an upload session instead, which is cancelled here, and the
        copy uploads the blob)."""
        query = urlencode({"mount": digest, "from": source_repository})
        r = self._request(
            "POST",
            repository,
            f"blobs/uploads/?{query}",
            headers={},
            data=b"",
            push=True,
            pull_from=source_repository,
        )
        if r.status == 201:
            return True
        if r.status != 202:
            raise self._unexpected("POST", f"a mount of {digest} into {repository}", r)
        location = r.headers.get("Location", "")
        if location:
            self._cancel_upload(repository, source_repository, location)
        return False

    def _cancel_upload(self, repository: str, source_repository: str, location: str) -> None:
        """DELETE the upload session at ``location`` (relative to the registry, or on it)."""
        url = urljoin(self.base + "/", location)
        scope = f"repository:{repository}:pull,push repository:{source_repository}:pull"
        r = self._exchange("DELETE", url, repository, scope, headers={})
        if r.status not in (200, 202, 204, 404):  # 404: the session is already gone
            raise self._unexpected("DELETE", f"the upload session {location}", r)


class RegistryPool(Closing):
    """A client per registry host, with the credentials for that host."""

    def __init__(
        self,
        *,
        env: Mapping[str, str],
        docker_config: Path | None,
        timeout: float,
        retries: int = DEFAULT_RETRIES,
        deadline: Deadline | None = None,
        network: NetworkConfig = DIRECT,
    ) -> None:
        self._env = dict(env)
        self._network = network
        self._docker_config = docker_config
        self._timeout = timeout
        self._retries = retries
        self._deadline = deadline if deadline is not None else Deadline()  # one for all hosts
        self._clients: dict[str, RegistryClient] = {}
        self._credentials: dict[str, Credentials | None] = {}

    def credentials(self, registry: str) -> Credentials | None:
        """Looked up once per host (a credential helper runs once)."""
        if registry not in self._credentials:
            self._credentials[registry] = find_credentials(
                registry, env=self._env, docker_config=self._docker_config, timeout=self._timeout
            )
        return self._credentials[registry]

    def client(self, registry: str) -> RegistryClient:
        if registry not in self._clients:
            self._clients[registry] = RegistryClient(
                registry,
                credentials=self.credentials(registry),
                timeout=self._timeout,
                retries=self._retries,
                deadline=self._deadline,
                network=self._network,
            )
        return self._clients[registry]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
