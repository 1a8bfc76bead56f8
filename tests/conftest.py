"""Shared fixtures: real wheels built in ``tmp_path`` and real HTTP index servers on 127.0.0.1,
and the one rule for tests marked ``docker`` or ``registry``: before any of their fixtures run,
the machine is probed (``tests.support.environment``); when what they need is missing they are
skipped, and they fail when ``CI=true``.

- ``wheel_factory``: ``wheel_factory("torch", "2.11.0+musa", tags="cp312-cp312-linux_x86_64")``
  or ``wheel_factory(WheelSpec(...))`` -> the wheel's path; ``wheel_factory.sdist(name, version)``.
- ``index_server``: a started ``IndexServer`` over an empty tree (``.root``, ``.url``,
  ``.simple_url``, ``.add(*listings, json=False)``, fault injection, ``.requests``).
- ``make_index_server``: more of them, e.g. a vendor and a public index:
  ``make_index_server("vendor")``, ``make_index_server("pypi", json=False, ranges=False)``.
- ``case``: a ``tests.support.lockcase.Case``: a vendor and a public index, a cache, a stack
  directory and the CLI in-process, for the lock tests.
- ``pypi_server``: the real pypiserver over an empty packages directory (``.add(*paths)``,
  ``.url`` is its simple URL).

Types for annotations: ``testbed.distributions.WheelFactory``,
``testbed.index_server.IndexServer`` and ``IndexServerFactory``, ``testbed.pypi_server.PypiServer``.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.distributions import WheelFactory
from testbed.index_server import IndexServer, IndexServerFactory
from testbed.pypi_server import PypiServer, find_pypi_server
from tests.support.environment import NEEDS, unavailable
from tests.support.lockcase import Case, open_case


def pytest_configure(config: pytest.Config) -> None:
    """A shell starts a background job with Ctrl-C (SIGINT) ignored, and an ignored signal
    stays ignored in every child: the tests that interrupt a child need it handled."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, missing in NEEDS.items():
        if item.get_closest_marker(marker) is None:
            continue
        reason = missing()
        if reason is not None:
            unavailable(reason, marker=marker)


@pytest.fixture
def wheel_factory(tmp_path: Path) -> WheelFactory:
    return WheelFactory(tmp_path / "dists")


@pytest.fixture
def make_index_server(tmp_path: Path) -> Iterator[IndexServerFactory]:
    factory = IndexServerFactory(tmp_path / "indexes")
    yield factory
    factory.stop_all()


@pytest.fixture
def index_server(make_index_server: IndexServerFactory) -> IndexServer:
    return make_index_server("index")


@pytest.fixture
def case(tmp_path: Path) -> Iterator[Case]:
    yield from open_case(tmp_path)


@pytest.fixture
def pypi_server(tmp_path: Path) -> Iterator[PypiServer]:
    if find_pypi_server() is None:
        pytest.skip("pypi-server is not installed (it comes with the dev extra: pypiserver)")
    with PypiServer(tmp_path / "pypi-packages") as server:
        yield server
