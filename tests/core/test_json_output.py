"""The envelope of every ``--json`` document, and what stdout carries under ``--json`` when
a command fails: one error document, whatever went wrong, with no credential in it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import build_image
from core.errors import IndexReadError
from core.json_output import document, error_document_of, render_json, schema
from tests.support.lockcase import PIN_TORCH, Case

SECRET = "s3cr3t-token"


def test_a_document_is_named_by_its_schema() -> None:
    assert schema("lock") == "build-image/lock/1"
    assert schema("lock", 2) == "build-image/lock/2"
    assert document("pin", {"digest": "sha256:x"}) == {
        "digest": "sha256:x",
        "schema": "build-image/pin/1",
    }
    with pytest.raises(ValueError, match="no schema key of its own"):
        document("pin", {"schema": "other"})


def test_documents_are_sorted_indented_and_ascii() -> None:
    assert render_json({"b": 1, "a": ["é", None]}) == (
        '{\n  "a": [\n    "\\u00e9",\n    null\n  ],\n  "b": 1\n}'
    )


def test_the_error_document_redacts_credentials() -> None:
    exc = IndexReadError(
        f"https://bot:{SECRET}@vendor.example/simple/: 401", hint=f"https://x:{SECRET}@h/"
    )
    doc = error_document_of("lock", exc, exit_code=1)
    assert doc == {
        "command": "lock",
        "error": {
            "code": "index",
            "exit_code": 1,
            "hint": "https://***@h/",
            "message": "https://***@vendor.example/simple/: 401",
        },
        "schema": "build-image/error/1",
    }


def _json(out: str) -> dict[str, object]:
    doc = json.loads(out)
    assert out == json.dumps(doc, indent=2, sort_keys=True) + "\n"
    assert isinstance(doc, dict)
    return doc


def test_a_usage_error_under_json_is_an_error_document(case: Case) -> None:
    result = case.run("lock", case.stack(PIN_TORCH), "--json", "--timeout", "0")
    assert result.code == 2
    assert _json(result.out) == {
        "command": "lock",
        "error": {
            "code": "usage",
            "exit_code": 2,
            "hint": "`build_image.py lock --help` lists the options",
            "message": "build_image.py lock: argument --timeout: '0' is not a positive, "
            "finite number of seconds",
        },
        "schema": "build-image/error/1",
    }
    assert result.err.startswith("error[usage]: build_image.py lock: argument --timeout")


def test_an_interrupt_under_json_is_an_error_document(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_: object, **__: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr("resolver.lock.lock_stack", interrupted)
    result = case.run("lock", case.stack(PIN_TORCH), "--json")
    assert result.code == 130
    assert _json(result.out) == {
        "command": "lock",
        "error": {
            "code": "interrupted",
            "exit_code": 130,
            "hint": None,
            "message": "interrupted; nothing was written",
        },
        "schema": "build-image/error/1",
    }


def test_a_bug_under_json_is_an_error_document_without_the_secret(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object, **__: object) -> object:
        raise ValueError(f"cannot read https://bot:{SECRET}@vendor.example/simple/")

    monkeypatch.setattr("resolver.lock.lock_stack", broken)
    result = case.run("lock", case.stack(PIN_TORCH), "--json")
    assert result.code == 1
    doc = _json(result.out)
    error = doc["error"]
    assert isinstance(error, dict)
    assert (error["code"], error["exit_code"]) == ("internal", 1)
    assert str(error["message"]).startswith(
        "unexpected ValueError: cannot read https://***@vendor.example/simple/"
    )
    assert SECRET not in result.out + result.err


def test_an_index_credential_never_reaches_the_document(case: Case) -> None:
    """A failing index given with credentials in its URL: the error document (and stderr)
    name the index, never the token."""
    url = f"http://bot:{SECRET}@127.0.0.1:9/simple/"
    result = case.run(
        "lock", case.stack(PIN_TORCH), "--json", "--retries", "0", "--index", f"mthreads={url}"
    )
    assert result.code == 1
    doc = _json(result.out)
    assert doc["schema"] == "build-image/error/1"
    assert SECRET not in result.out + result.err
    assert "127.0.0.1:9" in result.out


class _ClosedPipe(io.StringIO):
    """An output whose reader went away."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_an_error_document_into_a_closed_pipe_leaves_stderr_to_say_it(tmp_path: Path) -> None:
    err = io.StringIO()
    missing = tmp_path / "missing.yaml"
    code = build_image.main(["lock", str(missing), "--json"], out=_ClosedPipe(), err=err)
    assert code == 2
    assert err.getvalue().startswith("error[manifest]: ")
