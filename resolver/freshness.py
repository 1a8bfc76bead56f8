"""How long a cached index page is used without asking its server again (RFC 9111 4.2).

- ``Cache-Control: no-cache`` or ``no-store``: never; the page is revalidated every time.
- ``max-age=N``: N seconds (at most a day), as PyPI says (600).
- Neither, with a ``Last-Modified`` at least ``SETTLED`` seconds before the page was served: a
  tenth of that age (RFC 9111 4.2.2's heuristic, as browsers and HTTP caches apply it), at most
  ``HEURISTIC_CAP`` seconds: a page whose server says nothing is not trusted for longer than
  PyPI trusts its own. A page that changed within the hour is revalidated every time: a
  vendor's release is uploaded a wheel at a time.

A fresh page can only be older than its server's copy, never other bytes: every file it lists
is hash-checked when it is used, and ``--refresh`` (and ``lock --check``) revalidates every
page whatever its freshness.
"""

from __future__ import annotations

from collections.abc import Mapping
from email.utils import parsedate_to_datetime

MAX_AGE_CAP = 24 * 3600  # seconds: the longest max-age taken
HEURISTIC_CAP = 600  # seconds: the longest heuristic freshness (PyPI's own max-age)
HEURISTIC_FRACTION = 0.1  # of the page's age at the time it was served
SETTLED = 3600  # seconds: a page younger than this when served is never heuristically fresh


def fresh_until(headers: Mapping[str, str], now: float, *, last_modified: str | None) -> float:
    """The time until which a page served with ``headers`` at ``now`` is fresh (0: revalidate
    always). ``last_modified``: the page's validator when ``headers`` (a 304's) lack one."""
    directives = [
        d.strip().lower() for d in headers.get("Cache-Control", "").split(",") if d.strip()
    ]
    if any(d in ("no-cache", "no-store") for d in directives):
        return 0.0
    for d in directives:
        if d.startswith("max-age="):
            value = d.removeprefix("max-age=")
            return now + min(int(value), MAX_AGE_CAP) if value.isdigit() else 0.0
    modified = _seconds(headers.get("Last-Modified") or last_modified)
    if modified is None:
        return 0.0
    served = _seconds(headers.get("Date"))
    age = (now if served is None else served) - modified
    if age < SETTLED:
        return 0.0
    return now + min(HEURISTIC_FRACTION * age, HEURISTIC_CAP)


def _seconds(http_date: str | None) -> float | None:
    """An HTTP date as seconds since the epoch; None when absent or not a date."""
    if not http_date:
        return None
    try:
        parsed = parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()
