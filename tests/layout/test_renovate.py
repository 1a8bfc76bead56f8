""".github/renovate.json bumps what a bot may bump, and its regex manager reads the shipped stacks.

Renovate reads the ``base_image`` of the vLLM-MUSA stacks with a regex manager: these tests
compile its ``matchStrings`` with Python's ``re`` (Renovate's are RE2 with JavaScript's named
groups, ``(?<name>...)``, written ``(?P<name>...)`` here) and run them on the stacks as
shipped, so a stack rewritten in another form fails here rather than going unwatched. The
replacement Renovate writes (``autoReplaceStringTemplate``) is applied to a shipped stack and
the result loaded by the manifest reader. Everything else under stack/ (the vendor pins of
``packages:``, the public pins, the source revisions) is no bot's: the rules that say so are
checked, and no manager's expression matches any other line of a stack.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from images.builder.base_pin import repin_text
from manifest import load_manifest, lock_inputs_sha256

REPO = Path(__file__).resolve().parents[2]
RENOVATE = REPO / ".github" / "renovate.json"
STACKS = sorted((REPO / "stack").glob("*.yaml"))
MUSA_SDK = "registry.mthreads.com/mcconline/musa_sdk"
SDK_TAG = "5.2.0-devel-ubuntu22.04-s5000"
DIGEST = "sha256:" + "5e" * 32

# (depName, currentValue, currentDigest) of each shipped stack's base image; None: the stack is
# not watched (a demo stack: its debian:bookworm-slim is made by ci/make-base-image.sh)
EXPECTED: dict[str, tuple[str, str | None, str | None] | None] = {
    "demo-components.yaml": None,
    "demo-deadsnakes.yaml": None,
    "demo-v028.yaml": None,
    "demo.yaml": None,
    "vllm-musa-0.28.0-py310.yaml": (MUSA_SDK, SDK_TAG, None),
    "vllm-musa-0.28.0-py312.yaml": (MUSA_SDK, SDK_TAG, None),
}


def _config() -> dict[str, Any]:
    doc = json.loads(RENOVATE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _managers() -> list[dict[str, Any]]:
    managers = _config()["customManagers"]
    assert isinstance(managers, list)
    return managers


def python_regex(renovate: str) -> re.Pattern[str]:
    """A Renovate (RE2/JavaScript) expression as a Python one: named groups are spelled apart."""
    assert not re.search(r"\(\?<[=!]", renovate), f"{renovate}: RE2 has no lookbehind"
    return re.compile(renovate.replace("(?<", "(?P<"))


def file_pattern(pattern: str) -> re.Pattern[str]:
    """A ``managerFilePatterns`` entry; only the ``/regex/`` form is used here."""
    m = re.fullmatch(r"/(.+)/", pattern)
    assert m is not None, f"{pattern}: not a /regex/"
    return python_regex(m[1])


def watched_by(manager: dict[str, Any], path: Path) -> bool:
    rel = str(path.relative_to(REPO))
    return any(file_pattern(p).search(rel) for p in manager["managerFilePatterns"])


def captures(manager: dict[str, Any], text: str) -> list[tuple[str, str | None, str | None]]:
    out = []
    for expression in manager["matchStrings"]:
        for m in python_regex(expression).finditer(text):
            out.append((m["depName"], m["currentValue"], m["currentDigest"]))
    return out


def render_template(template: str, values: dict[str, str | None]) -> str:
    """The Handlebars that autoReplaceStringTemplate uses: ``{{name}}``, ``{{#if name}}..{{/if}}``."""
    text = re.sub(
        r"\{\{#if (\w+)\}\}(.*?)\{\{/if\}\}",
        lambda m: m[2] if values[m[1]] else "",
        template,
    )
    text = re.sub(r"\{\{(\w+)\}\}", lambda m: values[m[1]] or "", text)
    assert "{{" not in text, text
    return text


def _base_image_manager() -> dict[str, Any]:
    (manager,) = [m for m in _managers() if m.get("depTypeTemplate") == "base_image"]
    return manager


def test_every_shipped_stack_has_its_expectation() -> None:
    assert sorted(p.name for p in STACKS) == sorted(EXPECTED)


@pytest.mark.parametrize("stack", STACKS, ids=lambda p: p.name)
def test_the_base_image_manager_reads_the_stack_as_shipped(stack: Path) -> None:
    manager = _base_image_manager()
    expected = EXPECTED[stack.name]
    if expected is None:
        assert not watched_by(manager, stack)
        return
    assert watched_by(manager, stack)
    text = stack.read_text(encoding="utf-8")
    assert captures(manager, text) == [expected]
    # the reader's base_image is the reference the captures spell
    name, tag, digest = expected
    assert load_manifest(stack).base_image == name + (f":{tag}" if tag else "") + (
        f"@{digest}" if digest else ""
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            f'base_image: "{MUSA_SDK}:5.2.0-ubuntu22.04@{DIGEST}"',
            (MUSA_SDK, "5.2.0-ubuntu22.04", DIGEST),
        ),
        (f'base_image: "{MUSA_SDK}@{DIGEST}"   # by digest only', (MUSA_SDK, None, DIGEST)),
        (
            'base_image: "127.0.0.1:5000/mcconline/musa-sdk:5.2.0"',
            ("127.0.0.1:5000/mcconline/musa-sdk", "5.2.0", None),
        ),
        ('base_image: "ubuntu"', ("ubuntu", None, None)),
    ],
)
def test_the_base_image_manager_reads_every_form_of_an_image_reference(
    line: str, expected: tuple[str, str | None, str | None]
) -> None:
    assert captures(_base_image_manager(), f"schema: 1\n{line}\nsdk:\n") == [expected]


def test_a_digest_update_is_a_stack_the_reader_loads_with_the_same_lock(tmp_path: Path) -> None:
    stack = REPO / "stack" / "vllm-musa-0.28.0-py312.yaml"
    manager = _base_image_manager()
    text = stack.read_text(encoding="utf-8")
    (expression,) = manager["matchStrings"]
    m = python_regex(expression).search(text)
    assert m is not None
    replacement = render_template(
        manager["autoReplaceStringTemplate"],
        {"depName": m["depName"], "newValue": m["currentValue"], "newDigest": DIGEST},
    )
    updated = text[: m.start()] + replacement + text[m.end() :]
    changed = [
        (a, b) for a, b in zip(text.splitlines(), updated.splitlines(), strict=True) if a != b
    ]
    assert changed == [
        (f'base_image: "{MUSA_SDK}:{SDK_TAG}"', f'base_image: "{MUSA_SDK}:{SDK_TAG}@{DIGEST}"')
    ]
    # the bot writes the line as `pin-base` does
    base = f"{MUSA_SDK}:{SDK_TAG}"
    assert repin_text(text, path=stack, base=base, pinned=f"{base}@{DIGEST}") == updated
    copy = tmp_path / stack.name
    copy.write_text(updated, encoding="utf-8")
    bumped = load_manifest(copy)
    assert bumped.base_image == f"{MUSA_SDK}:{SDK_TAG}@{DIGEST}"
    # the base image is no lock input: the bot's PR leaves the committed lock current
    assert lock_inputs_sha256(bumped) == lock_inputs_sha256(load_manifest(stack))


@pytest.mark.parametrize("stack", STACKS, ids=lambda p: p.name)
def test_no_manager_matches_any_other_line_of_a_stack(stack: Path) -> None:
    text = stack.read_text(encoding="utf-8")
    for manager in _managers():
        for expression in manager["matchStrings"]:
            for m in python_regex(expression).finditer(text):
                line = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
                assert line == "", f"{stack.name}: a match inside a line: {line!r}"
                assert m[0].startswith("base_image: "), f"{stack.name}: {m[0]!r}"


def test_only_the_actions_and_the_base_image_are_a_bot_s() -> None:
    config = _config()
    assert config["enabledManagers"] == ["github-actions", "custom.regex"]
    assert [m.get("depTypeTemplate") for m in _managers()] == ["base_image"]
    rules = config["packageRules"]
    # the first rule on stack/ turns everything there off, whatever the manager ...
    on_stacks = [
        r for r in rules if any(f.startswith("stack/") for f in r.get("matchFileNames", []))
    ]
    assert on_stacks[0] == {
        "description": on_stacks[0]["description"],
        "matchFileNames": ["stack/**"],
        "enabled": False,
    }
    # ... the only rule that turns something back on is the base image's ...
    enabling = [r for r in on_stacks if r.get("enabled") is True]
    assert [(r["matchManagers"], r["matchDepTypes"]) for r in enabling] == [
        (["custom.regex"], ["base_image"])
    ]
    # ... and after it a new tag (a new MUSA SDK) is off again: digests only
    assert on_stacks.index(enabling[0]) < len(on_stacks) - 1
    last = on_stacks[-1]
    assert (last["matchDepTypes"], last["matchUpdateTypes"], last["enabled"]) == (
        ["base_image"],
        ["major", "minor", "patch"],
        False,
    )


def _schema_properties(schema: dict[str, Any], definition: str) -> set[str]:
    items = schema["definitions"][definition]["items"]
    return {k for part in items["allOf"] if "properties" in part for k in part["properties"]}


def test_every_key_is_one_renovate_knows() -> None:
    # the vendored schema (make lint) accepts unknown keys; a misspelt one would do nothing
    spec = importlib.util.find_spec("check_jsonschema")  # found, not imported
    assert spec is not None, "check-jsonschema is missing: `make dev` installs it"
    assert spec.origin is not None
    vendored = Path(spec.origin).parent / "builtin_schemas" / "vendor" / "renovate.json"
    schema = json.loads(vendored.read_text(encoding="utf-8"))
    config = _config()
    assert sorted(set(config) - set(schema["properties"]) - {"$schema"}) == []
    for rule in config["packageRules"]:
        assert sorted(set(rule) - _schema_properties(schema, "packageRules")) == []
    for manager in config["customManagers"]:
        assert sorted(set(manager) - _schema_properties(schema, "customManagers")) == []
