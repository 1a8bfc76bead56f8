"""How long a cached page is used without asking its server: max-age, no-cache, and RFC 9111's
heuristic for settled pages, capped."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from resolver.freshness import fresh_until

NOW = 1_800_000_000.0
HOUR = 3600.0


def _date(seconds_ago: float) -> str:
    return formatdate(NOW - seconds_ago, usegmt=True)


@pytest.mark.parametrize(
    ("headers", "fresh_for"),
    [
        ({"Cache-Control": "max-age=600"}, 600.0),
        ({"Cache-Control": "public, max-age=86400000"}, 86400.0),  # at most a day
        ({"Cache-Control": "max-age=600, no-cache"}, None),
        ({"Cache-Control": "no-store", "Last-Modified": _date(30 * 24 * HOUR)}, None),
        ({"Cache-Control": "max-age=soon", "Last-Modified": _date(30 * 24 * HOUR)}, None),
        ({"Last-Modified": _date(2 * HOUR)}, 600.0),  # a tenth of 2 h, capped at 10 min
        ({"Last-Modified": _date(1.5 * HOUR)}, 540.0),  # a tenth of 1.5 h
        ({"Last-Modified": _date(0.5 * HOUR)}, None),  # changed within the hour
        ({"Last-Modified": _date(-HOUR)}, None),  # modified in the future
        ({"Last-Modified": "yesterday"}, None),
        ({"Last-Modified": "Mon, 01 Jan 99999 00:00:00 GMT"}, None),  # not a date Python has
        ({"Last-Modified": "Mon, 32 Foo 2020 99:99:99 GMT"}, None),
        ({"Last-Modified": "x" * 10_000}, None),
        # a server whose clock says year 9999: still at most ten minutes
        ({"Last-Modified": _date(2 * HOUR), "Date": "Fri, 31 Dec 9999 23:59:59 GMT"}, 600.0),
        ({}, None),
        # the age is the server's: its Date, not this host's clock
        ({"Last-Modified": _date(1.5 * HOUR), "Date": _date(HOUR)}, None),
        ({"Last-Modified": _date(3 * HOUR), "Date": _date(1.5 * HOUR)}, 600.0),
    ],
)
def test_freshness(headers: dict[str, str], fresh_for: float | None) -> None:
    got = fresh_until(headers, NOW, last_modified=None)
    assert got == (0.0 if fresh_for is None else pytest.approx(NOW + fresh_for))


def test_a_304_without_last_modified_takes_the_cached_copy_s() -> None:
    assert fresh_until({}, NOW, last_modified=_date(2 * HOUR)) == NOW + 600.0
    assert fresh_until({"Last-Modified": _date(0)}, NOW, last_modified=_date(2 * HOUR)) == 0.0
