"""The registry client within the command's network deadline, against a real HTTP server on
127.0.0.1 that plays a registry sending a manifest one byte at a time; and ``--deadline`` on
the registry commands."""

from __future__ import annotations

import io

import pytest

import build_image
from core.deadline import Deadline
from core.errors import DeadlineError
from images.publish.registry import RegistryClient
from testbed.index_server import IndexServer


def test_a_trickling_registry_is_cut_off_at_the_deadline(index_server: IndexServer) -> None:
    manifest = index_server.root / "v2" / "team" / "app" / "manifests" / "1.0"
    manifest.parent.mkdir(parents=True)
    manifest.write_bytes(b'{"schemaVersion": 2}' * 100)
    index_server.trickle("/v2/", 10, times=3)
    registry = f"127.0.0.1:{index_server.port}"
    client = RegistryClient(registry, deadline=Deadline(1.0))
    with client, pytest.raises(DeadlineError) as info:
        client.fetch("team/app", "1.0")
    assert info.value.message == (
        f"the registry {registry}: GET http://{registry}/v2/team/app/manifests/1.0 did not "
        "finish within the network deadline of this command (--deadline 1)"
    )
    assert len(index_server.requests) == 1


def test_pin_refuses_a_deadline_that_is_not_positive() -> None:
    err = io.StringIO()
    assert build_image.main(["pin", "127.0.0.1:9/team/app:1.0", "--deadline", "0"], err=err) == 2
    assert err.getvalue() == (
        "error[usage]: --deadline 0: a deadline is a positive number of seconds\n"
        "hint: the default is --deadline 3600\n"
    )


def test_pin_against_a_registry_that_trickles_its_answer_stalls_and_says_so(
    index_server: IndexServer,
) -> None:
    index_server.trickle("/v2/", 4, times=10, head=True)
    registry = f"127.0.0.1:{index_server.port}"
    err = io.StringIO()
    code = build_image.main(
        ["pin", f"{registry}/team/app:1.0", "--timeout", "1", "--retries", "1"], err=err
    )
    assert (code, err.getvalue()) == (
        1,
        f"error[registry-unreachable]: the registry {registry} did not answer within 1s "
        f"(http://{registry}/v2/team/app/manifests/1.0, 2 attempts)\n"
        "hint: retry, or raise --timeout\n",
    )
    assert len(index_server.requests) == 2  # tried again once, then refused
