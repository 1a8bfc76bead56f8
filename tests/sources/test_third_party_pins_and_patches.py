"""third_party/PINS parsing and checking, the sdist commit check, and the files a patch
series touches (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import SourceError
from manifest import Manifest, parse_manifest
from sources.patches import series_touched, touched_files
from sources.third_party_pins import check_pins, check_sdist_commit, parse_pins

REV = "2cf0a6915ce544dc493a0990f2ea38d81601128a"
OTHER = "1" * 40
STACK = f"""\
schema: 1
name: pins
release: "0.28.0"
target: {{python: "3.11", arch: x86_64, glibc: "2.36"}}
indexes: {{pypi: {{url: "https://pypi.org/simple/"}}}}
default_index: pypi
sources:
  vllm: {{sdist: {{index: pypi, version: "0.28.0"}}, rev: "{REV}"}}
  vllm-musa:
    path: demo/vllm-musa
    product: true
    third_party:
      vllm: {{source: vllm, pin: VLLM_COMMIT}}
"""


def _manifest() -> Manifest:
    return parse_manifest(STACK, path=Path("stack/pins.yaml"))


def test_pins_parse_key_value_lines() -> None:
    text = f"# pins\nVLLM_COMMIT={REV}\n\nFLASHINFER_COMMIT={OTHER}\n"
    assert parse_pins(text, where="PINS") == {"VLLM_COMMIT": REV, "FLASHINFER_COMMIT": OTHER}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("VLLM_COMMIT = abc\n", "PINS:1: 'VLLM_COMMIT = abc' is not a KEY=VALUE line"),
        (f"VLLM_COMMIT={REV}\nVLLM_COMMIT={OTHER}\n", "PINS:2: VLLM_COMMIT is set twice"),
    ],
)
def test_pins_refuse_other_lines(text: str, message: str) -> None:
    with pytest.raises(SourceError) as err:
        parse_pins(text, where="PINS")
    assert err.value.message == message


def test_pins_agree_with_the_manifest() -> None:
    m = _manifest()
    driver = m.sources[1]
    assert check_pins(m, driver, {"VLLM_COMMIT": REV}) == [f"VLLM_COMMIT={REV} = sources.vllm.rev"]


def test_pins_that_disagree_name_both_values_and_the_fix() -> None:
    m = _manifest()
    with pytest.raises(SourceError) as err:
        check_pins(m, m.sources[1], {"VLLM_COMMIT": OTHER})
    assert err.value.message == (
        f"sources.vllm-musa: third_party/PINS pins VLLM_COMMIT={OTHER}, but sources.vllm.rev "
        f"is {REV}: the manifest would stage another vllm than vllm-musa is built against"
    )
    assert err.value.hint == (
        f"set sources.vllm.rev to {OTHER}, or move sources.vllm-musa to a revision whose "
        f"third_party/PINS pins {REV}"
    )


def test_pins_without_the_key_are_refused() -> None:
    m = _manifest()
    with pytest.raises(SourceError) as err:
        check_pins(m, m.sources[1], {"FLASHINFER_COMMIT": OTHER})
    assert err.value.message == (
        "sources.vllm-musa: third_party/PINS has no VLLM_COMMIT, which "
        "sources.vllm-musa.third_party.vllm.pin names"
    )


def test_the_sdist_commit_is_the_rev() -> None:
    source = _manifest().sources[0]
    assert check_sdist_commit(source, "__commit_id__ = commit_id = 'g2cf0a6915'\n") == "2cf0a6915"
    assert check_sdist_commit(source, None) == ""
    with pytest.raises(SourceError) as err:
        check_sdist_commit(source, "__commit_id__ = commit_id = 'gdeadbeef1'\n")
    assert err.value.message == (
        f"sources.vllm: the sdist was cut from commit deadbeef1, but sources.vllm.rev is {REV}"
    )


PATCH = """\
From 1 Mon Sep 17 00:00:00 2001
Subject: [PATCH] add the marker

diff --git a/vllm/platforms/musa_series.py b/vllm/platforms/musa_series.py
new file mode 100644
--- /dev/null
+++ b/vllm/platforms/musa_series.py
@@ -0,0 +1 @@
+SERIES = "demo"
"""
PLAIN = """\
--- a/vllm/envs.py
+++ b/vllm/envs.py
@@ -1 +1 @@
-x
+y
"""


def test_touched_files_from_git_and_plain_headers() -> None:
    assert touched_files(PATCH) == {"vllm/platforms/musa_series.py"}
    assert series_touched([PATCH, PLAIN]) == {"vllm/platforms/musa_series.py", "vllm/envs.py"}
