"""``serve-check``: the semantic smoke of one image, and its evidence bundle.

The image's server is started with the profile's launch settings and must become healthy
within the deadline; then every ``check.requests`` entry is sent (streaming, greedy) and its
answer must contain the expected text and end with the expected ``finish_reason``; then the
server's log must match every ``check.log_patterns`` regex (the attention backend and the
compilation mode, say). The bundle records the image ID and registry digests, the
full ``docker run`` line, the server URL, every answer, the first log line each pattern
matched, the log tail, and the verdict. It is written (atomically) whether the check passes or
not, to ``build/serve-check/<image id>/``: ``bundle.json`` and ``server.log``.
``publish --release`` looks there for a passing bundle of the image it publishes.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ServeError
from core.fsutil import atomic_write_text
from core.transport import Transport
from images.engine.port import LocalImage, ServingEngine
from images.serve.client import chat_body, completion_body, stream_request
from images.serve.launch import docker_run_words
from images.serve.server import ServerLifetime, tail
from manifest.serving import CheckRequest, ServingProfile

BUNDLE_SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class CheckOutcome:
    name: str
    passed: bool
    reason: str | None  # why it failed
    text: str
    finish_reason: str | None
    output_tokens: int
    ttft_ms: float | None
    e2e_ms: float

    def to_json(self) -> dict[str, Any]:
        """Every field; the times rounded to the microsecond."""
        return {
            **dataclasses.asdict(self),
            "ttft_ms": None if self.ttft_ms is None else round(self.ttft_ms, 3),
            "e2e_ms": round(self.e2e_ms, 3),
        }


@dataclass(frozen=True, kw_only=True)
class ServeCheckBundle:
    image: str  # the reference given
    image_id: str
    repo_digests: tuple[str, ...]
    docker_host: str
    host: Mapping[str, str]  # what the daemon says of its host
    launch: tuple[str, ...]  # the `docker run` words
    server_url: str | None
    ready_after: float | None
    checks: tuple[CheckOutcome, ...]
    log_patterns: Mapping[str, str | None]  # pattern -> the first line it matched
    log_tail: str
    failures: tuple[str, ...]
    time: str
    profile: Mapping[str, Any]

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        """Every field (``ready_after`` as ``ready_after_s``), the verdict and the schema."""
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        ready = doc.pop("ready_after")
        return doc | {
            "schema": BUNDLE_SCHEMA,
            "host": dict(self.host),
            "ready_after_s": None if ready is None else round(ready, 3),
            "checks": [c.to_json() for c in self.checks],
            "log_patterns": dict(self.log_patterns),
            "passed": self.passed,
            "profile": dict(self.profile),
        }


def evaluate(check: CheckRequest, text: str, finish: str | None) -> str | None:
    """Why the answer fails ``check``, or None (pure)."""
    if check.contains is not None and check.contains not in text:
        return f"the answer {text[:200]!r} does not contain {check.contains!r}"
    if check.finish_reason is not None and finish != check.finish_reason:
        return f"finish_reason is {finish!r}, not {check.finish_reason!r}"
    return None


def run_serve_check(
    engine: ServingEngine,
    transport: Transport,
    profile: ServingProfile,
    image: str,
    facts: LocalImage,
    *,
    run_id: str,
    host: str,
    now: str,
    root: Path,
    profile_doc: Mapping[str, Any],
) -> tuple[ServeCheckBundle, str]:
    """Run the check; returns the bundle and the whole server log (never raises for a
    failed check: the bundle says what failed). ``root``: the repository, whose paths the
    evidence names relative to it; ``profile_doc``: the profile as the evidence shows it."""
    server = ServerLifetime(
        engine,
        profile,
        facts.id,
        run_id=run_id,
        role="check",
        host=host,
        transport=transport,
        what=f"serve-check of {image}",
    )
    outcomes: list[CheckOutcome] = []
    failures: list[str] = []
    url: str | None = None
    try:
        with server:
            url = server.url
            for check in profile.checks:
                outcome = _send(transport, url, profile, check)
                outcomes.append(outcome)
                if not outcome.passed:
                    failures.append(f"request {check.name}: {outcome.reason}")
    except ServeError as exc:
        failures.append(exc.message.split("; the last lines of its log:", 1)[0])
    log = server.log  # the whole log, kept when the server stopped, healthy or not
    lines = log.splitlines()  # each pattern -> the first line it matches (None: no line does)
    patterns = {
        p: next((ln for ln in lines if re.search(p, ln)), None) for p in profile.log_patterns
    }
    for pattern, line in patterns.items():
        if line is None:
            failures.append(f"the server log has no line matching {pattern!r}")
    bundle = ServeCheckBundle(
        image=image,
        image_id=facts.id,
        repo_digests=facts.repo_digests,
        docker_host=engine.docker_host,
        host=engine.host(),
        launch=tuple(docker_run_words(server.spec, root)),
        server_url=url,
        ready_after=server.ready_after,
        checks=tuple(outcomes),
        log_patterns=patterns,
        log_tail=tail(log),
        failures=tuple(failures),
        time=now,
        profile=profile_doc,
    )
    return bundle, log


def _send(
    transport: Transport, url: str, profile: ServingProfile, check: CheckRequest
) -> CheckOutcome:
    model = profile.model.name
    if check.chat is not None:
        endpoint, body = "/v1/chat/completions", chat_body(model, check.chat, check.max_tokens)
    else:
        assert check.prompt is not None
        endpoint = "/v1/completions"
        body = completion_body(model, check.prompt, check.max_tokens, ignore_eos=False)
    result = stream_request(
        transport, url + endpoint, body, timeout=profile.ab.request_timeout, origin=0.0
    )
    reason = result.error if not result.ok else evaluate(check, result.text, result.finish_reason)
    return CheckOutcome(
        name=check.name,
        passed=reason is None,
        reason=reason,
        text=result.text,
        finish_reason=result.finish_reason,
        output_tokens=result.output_tokens,
        ttft_ms=None if result.ttft is None else result.ttft * 1000,
        e2e_ms=result.e2e * 1000,
    )


def write_bundle(directory: Path, bundle: ServeCheckBundle, log: str) -> Path:
    """``bundle.json`` and ``server.log`` in ``directory``; returns the bundle's path."""
    atomic_write_text(directory / "server.log", log)
    path = directory / "bundle.json"
    atomic_write_text(path, json.dumps(bundle.to_json(), indent=2, sort_keys=True) + "\n")
    return path


def read_verdict(path: Path) -> tuple[str, bool, tuple[str, ...]]:
    """The image ID, the verdict and the failures of a bundle file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise ServeError(f"{path}: not a serve-check bundle: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != BUNDLE_SCHEMA:
        raise ServeError(f"{path}: not a serve-check bundle of schema {BUNDLE_SCHEMA}")
    image_id, passed, failures = doc.get("image_id"), doc.get("passed"), doc.get("failures")
    if (
        not isinstance(image_id, str)
        or not isinstance(passed, bool)
        or not isinstance(failures, list)
    ):
        raise ServeError(f"{path}: a serve-check bundle needs image_id, passed and failures")
    return image_id, passed, tuple(str(f) for f in failures)
