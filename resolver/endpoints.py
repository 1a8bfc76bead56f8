"""The indexes as a run uses them: the manifest's URLs, ``--index NAME=URL`` overrides, and
credentials from the environment (pure: the environment is passed in, read once by the CLI)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from core.console import name_and_url
from core.errors import UsageError
from core.urls import check_index_url, split_credentials

if TYPE_CHECKING:
    from manifest import Manifest


@dataclass(frozen=True, kw_only=True)
class IndexEndpoint:
    """An index as the client uses it: the effective URL (after ``--index``) and its auth."""

    name: str
    url: str  # without credentials
    format: str = "simple"
    auth: tuple[str, str] | None = None

    def __repr__(self) -> str:  # never print credentials
        return f"IndexEndpoint(name={self.name!r}, url={self.url!r})"


def auth_variable(index: str) -> str:
    """The environment variable that carries ``user:token`` for an index."""
    return f"BUILD_IMAGE_INDEX_{index.upper().replace('-', '_')}_AUTH"


def _is_placeholder(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host == "invalid" or host.endswith(".invalid")


def parse_index_overrides(values: Sequence[str]) -> dict[str, str]:
    """``["mthreads=https://mirror/simple/"]`` -> ``{"mthreads": "https://mirror/simple/"}``."""
    return dict(name_and_url(value, flag="--index") for value in values)


def effective_endpoints(
    manifest: Manifest, overrides: Mapping[str, str], env: Mapping[str, str]
) -> dict[str, IndexEndpoint]:
    """Each index's URL: ``--index NAME=URL`` (``overrides``), else the manifest's
    ``mirrors.indexes.NAME``, else ``indexes.NAME.url``; credentials from ``env``.

    A mirror changes where files are fetched from, never the lock inputs."""
    for name in overrides:
        if name not in manifest.indexes:
            raise UsageError(
                f"--index {name}=...: the manifest has no index named {name!r}",
                hint=f"its indexes are: {', '.join(sorted(manifest.indexes))}",
            )
    out: dict[str, IndexEndpoint] = {}
    for name, spec in manifest.indexes.items():
        mirror = manifest.mirrors.indexes.get(name, spec.url)
        url, auth = split_credentials(overrides.get(name, mirror), name=name)
        if name not in overrides and _is_placeholder(url):
            raise UsageError(
                f"index {name}: {url} is a placeholder (the .invalid domain never resolves)",
                hint=f"pass --index {name}=URL with your site's index or mirror",
            )
        check_index_url(name, url)
        env_auth = env.get(auth_variable(name))
        if env_auth:
            user, sep, password = env_auth.partition(":")
            if not sep or not user:
                raise UsageError(
                    f"{auth_variable(name)} must be user:token",
                    hint="the value is not shown here; set it as USER:TOKEN",
                )
            auth = (user, password)
        out[name] = IndexEndpoint(name=name, url=url, format=spec.format, auth=auth)
    return out
