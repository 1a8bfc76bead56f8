"""The JSON Schema of a stack manifest (docs/stack.schema.json): generated, committed, named by
every shipped stack, and it refuses what the reader refuses, but for the rules it cannot
state, which are listed here as known gaps (and in docs/manifest.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from core.errors import ManifestError
from manifest import load_manifest, parse_manifest
from manifest.key_table import NORMAL_VERSION
from manifest.schema import KEYWORDS, SCHEMA_FILE, schema_json
from tests.manifest.test_hostile_manifests import BASE, CASES
from tests.manifest.test_manifest import GOOD
from tests.manifest.test_reference import complete_example

REPO = Path(__file__).resolve().parents[2]
STACKS = sorted((REPO / "stack").glob("*.yaml"))
FIRST_LINE = "# yaml-language-server: $schema=../docs/stack.schema.json"
REGENERATE = ".venv/bin/python build_image.py schema --out docs/stack.schema.json"


COMMITTED: dict[str, Any] = json.loads((REPO / SCHEMA_FILE).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(COMMITTED)


# what an editor's YAML language server applies: draft-07, which reads every keyword the same
DRAFT_07 = jsonschema.Draft7Validator(COMMITTED)


def _data(text: str) -> object:
    """What an editor's schema check sees: the YAML as data (the texts here are benign)."""
    return yaml.safe_load(text)


def _errors(validator: jsonschema.Draft202012Validator, text: str) -> list[str]:
    """The dotted paths the schema refuses ``text`` at."""
    return [".".join(str(p) for p in e.absolute_path) for e in validator.iter_errors(_data(text))]


def test_the_committed_schema_is_what_the_schema_command_writes() -> None:
    committed = (REPO / SCHEMA_FILE).read_text(encoding="utf-8")
    assert committed == schema_json(), f"{SCHEMA_FILE} is stale: regenerate it with `{REGENERATE}`"


def test_the_schema_command_prints_and_writes_the_same_bytes(tmp_path: Path) -> None:
    import io

    import build_image

    out, err = io.StringIO(), io.StringIO()
    assert build_image.main(["schema"], out=out, err=err) == 0
    assert out.getvalue() == schema_json()
    target = tmp_path / "sub" / "stack.schema.json"
    assert build_image.main(["schema", "--out", str(target)], out=out, err=err) == 0
    assert target.read_text(encoding="utf-8") == out.getvalue()
    assert err.getvalue() == f"wrote {target}\n"
    assert [p.name for p in target.parent.iterdir()] == ["stack.schema.json"]  # no temp left


def test_the_schema_is_a_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(COMMITTED)
    assert COMMITTED["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("stack", STACKS, ids=[s.name for s in STACKS])
def test_every_shipped_stack_names_the_schema_and_is_valid(
    validator: jsonschema.Draft202012Validator, stack: Path
) -> None:
    text = stack.read_text(encoding="utf-8")
    assert text.splitlines()[0] == FIRST_LINE
    assert (stack.parent / FIRST_LINE.partition("$schema=")[2]).resolve() == REPO / SCHEMA_FILE
    load_manifest(stack)
    assert _errors(validator, text) == []
    assert list(DRAFT_07.iter_errors(_data(text))) == []


def test_the_complete_example_is_valid(validator: jsonschema.Draft202012Validator) -> None:
    assert _errors(validator, complete_example()) == []


def _subschemas(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every schema in ``node``, itself included (values of enum, const, default are data)."""
    yield node
    children: list[object] = [*node.get("properties", {}).values()]
    for keyword in ("additionalProperties", "items", "propertyNames", "not", "if", "then", "else"):
        children.append(node.get(keyword))
    for keyword in ("allOf", "anyOf", "oneOf"):
        children.extend(node.get(keyword, []))
    for child in children:
        if isinstance(child, dict):
            yield from _subschemas(child)


def test_the_schema_uses_only_keywords_that_mean_the_same_in_draft_07() -> None:
    used = {keyword for sub in _subschemas(COMMITTED) for keyword in sub}
    assert used - KEYWORDS == set()


def test_every_default_is_valid_for_its_key() -> None:
    defaults = [s for s in _subschemas(COMMITTED) if "default" in s]
    assert len(defaults) > 40
    for sub in defaults:
        own = {k: v for k, v in sub.items() if k != "default"}
        jsonschema.Draft202012Validator(own).validate(sub["default"])


def test_every_key_has_a_type_and_a_description() -> None:
    for sub in _subschemas(COMMITTED):
        for name, prop in sub.get("properties", {}).items():
            if isinstance(prop, dict) and "type" in prop:  # not an if/then fragment
                assert prop.get("description"), name


@pytest.mark.parametrize(
    "version",
    ["0.1.95", "2.11.0.post2+musa5.2.0", "1!2.0rc1.post3.dev4+ubuntu.1", "1.0a0", "0.3.7.post2",
     "2.11.0-post2+musa5.2.0", "1.0.0RC1", "v1.0", "1.0+Musa", "01.2", "1.0+musa.01", "1.0.post",
     "1.0_1", "1.0-1", "1.0c1", "1.0+"],
)  # fmt: skip
def test_the_pinned_version_pattern_is_the_readers_normal_form(version: str) -> None:
    import re

    text = GOOD.replace("2.11.0.post2+musa5.2.0", version)
    try:
        parse_manifest(text, path=Path("stack/t.yaml"))
        reader_takes = True
    except ManifestError:
        reader_takes = False
    assert bool(re.search(NORMAL_VERSION, version)) == reader_takes


def _replace(old: str, new: str, base: str = GOOD) -> str:
    assert old in base
    return base.replace(old, new)


# (id, manifest text, the reader's message after the path): the reader and the schema refuse it
REFUSED: list[tuple[str, str, str]] = [
    ("licenses-not-spdx", GOOD + 'image:\n  repository: registry.example/vllm-musa\n  licenses: "Apache-2.0; rm -rf /"\n', ":20: image.licenses: 'Apache-2.0; rm -rf /' is not an SPDX license expression"),
    ("python-float", _replace('python: "3.12"', "python: 3.10"), ":4: target.python: must be a string, got the number 3.1"),
    ("unknown-key", _replace("  torch: {version", "  torch: {verison"), ":10: packages.torch.verison: unknown key"),
    ("wheel-kind", _replace("wheel: native", "wheel: binary"), ":10: packages.torch.wheel: 'binary' is not one of native, abi3, pure"),
    ("version-not-normal", _replace("2.11.0.post2+musa5.2.0", "2.11.0-post2+musa5.2.0"), ":10: packages.torch.version: '2.11.0-post2+musa5.2.0' is not in normal form; write '2.11.0.post2+musa5.2.0'"),
    ("index-credentials", _replace("https://vendor.example", "https://bob:s3cret@vendor.example"), ":6: indexes.mthreads.url: credentials do not belong in the manifest"),
    ("line-not-major-minor", _replace('"2.9": "0.15.0"', '"2": "0.15.0"'), ":17: rules.line_map.compressed-tensors.versions.2: '2' is not a MAJOR.MINOR line"),
    ("missing-required", _replace("default_index: pypi\n", ""), ": (top level): missing required key 'default_index'"),
    ("mirror-credentials", GOOD + 'mirrors:\n  apt: "https://bob:s3cret@mirror.example/debian"\n', ":19: mirrors.apt: 'https://***@mirror.example/debian' is not an http(s) URL without credentials"),
    ("git-ext-transport", GOOD + f'sources:\n  vllm: {{git: "ext::sh -c touch% /tmp/pwned", rev: "{"a" * 40}"}}\n', ":19: sources.vllm.git: 'ext::sh -c touch% /tmp/pwned' is not a git URL this tool clones"),
    ("git-option", GOOD + f'sources:\n  vllm: {{git: "--upload-pack=touch /tmp/x", rev: "{"a" * 40}"}}\n', ":19: sources.vllm.git: '--upload-pack=touch /tmp/x' is not a git URL this tool clones"),
    ("git-credentials", GOOD + f'sources:\n  vllm: {{git: "https://tok:en@github.com/a/b.git", rev: "{"a" * 40}"}}\n', ":19: sources.vllm.git: 'https://***@github.com/a/b.git' is not a git URL this tool clones"),
    ("git-without-rev", GOOD + 'sources:\n  vllm: {git: "https://g.example/v.git"}\n', ":19: sources.vllm: a git source needs rev: a 40-hex commit id"),
    ("git-and-path", GOOD + f'sources:\n  vllm: {{git: "https://g.example/v.git", rev: "{"a" * 40}", path: v}}\n', ":19: sources.vllm: a source is one of git + rev, path, or sdist; not git and path"),
    ("rev-a-branch", GOOD + 'sources:\n  vllm: {git: "https://g.example/v.git", rev: main}\n', ":19: sources.vllm.rev: 'main' is not a 40-hex commit id"),
    ("arch", _replace("arch: x86_64", "arch: arm64"), ":4: target.arch: 'arm64' is not one of x86_64, aarch64"),
    ("glibc-below-aarch64", _replace('arch: x86_64, glibc: "2.35"', 'arch: aarch64, glibc: "2.12"'), ":4: target.glibc: glibc 2.12 is not supported on aarch64"),
    ("schema-2", _replace("schema: 1", "schema: 2"), ":1: schema: unsupported schema 2; this tool reads schema 1"),
    ("schema-true", _replace("schema: 1", "schema: true"), ":1: schema: unsupported schema True; this tool reads schema 1"),
    ("name-with-space", _replace("name: t", "name: a b"), ":2: name: 'a b' is not a valid name (letters, digits, '.', '_', '-')"),
    ("no-index", _replace('  mthreads: {url: "https://vendor.example/simple/"}\n  pypi: {url: "https://pypi.org/simple/"}\n', "  {}\n"), ":5: indexes: at least one index is required"),
    ("index-name", _replace("  pypi: {url", "  PyPI: {url"), ":7: indexes.PyPI: an index name is lowercase letters, digits, '-' and '_'"),
    ("index-format", _replace('pypi: {url: "https://pypi.org/simple/"}', 'pypi: {url: "https://pypi.org/simple/", format: flat}'), ":7: indexes.pypi.format: 'flat' is not one of simple, find-links"),
    ("index-ftp", _replace('"https://pypi.org/simple/"', '"ftp://pypi.org/simple/"'), ":7: indexes.pypi.url: 'ftp://pypi.org/simple/' is not an http(s) URL"),
    ("deps-a-string", _replace("deps: false", "deps: 'no'"), ":11: packages.torchada.deps: must be true or false, got the string 'no'"),
    ("package-name", _replace("  torchada: {", "  _torchada: {"), ":11: packages._torchada: '_torchada' is not a valid project name"),
    ("pin-missing-wheel", _replace(", wheel: pure, deps: false", ", deps: false"), ":11: packages.torchada: missing required key 'wheel'"),
    ("same-line-of-one", _replace("same_line: [[torch, torch-musa]]", "same_line: [[torch]]"), ":15: rules.same_line.0: a group needs at least two packages"),
    ("requirements-a-string", _replace("requirements:\n  - numpy==1.26.4\n", "requirements: numpy==1.26.4\n"), ":12: requirements: must be a list, got the string 'numpy==1.26.4'"),
    ("deadsnakes-without-mirror", GOOD + "python_install: {provider: deadsnakes}\n", ":18: python_install: the deadsnakes provider needs a mirror URL"),
    ("distro-with-mirror", GOOD + 'python_install: {mirror: "https://m.example/u"}\n', ":18: python_install: mirror, key_fingerprint and key_url only apply to the deadsnakes provider"),
    ("fingerprint-short", GOOD + 'python_install: {provider: deadsnakes, mirror: "https://m.example/u", key_fingerprint: "ABCD"}\n', ":18: python_install.key_fingerprint: must be a 40-hex-digit OpenPGP fingerprint"),
    ("sdk-apt-without-runtime", GOOD + 'sdk_apt: {url: "https://a.example/u", suite: jammy, component: main, key_fingerprint: "' + "A" * 40 + '", packages: [musart-5-2]}\nsdk: {from: apt}\n', ":19: sdk: from: apt needs runtime: the one MUSA runtime line every sdk_apt package is pinned to"),
    ("sdk-base-with-runtime", GOOD + 'sdk: {from: base, runtime: "5.2"}\n', ":18: sdk.runtime: only applies to from: apt (the base image's SDK is whatever line it has)"),
    ("sdk-from-auto", GOOD + "sdk: {from: auto}\n", ":18: sdk.from: 'auto' is not one of base, apt"),
    ("mooncake-without-version", GOOD + "components:\n  mooncake: {enabled: true, index: pypi}\n", ":19: components.mooncake: missing required key 'version'"),
    ("vllm-rs-with-a-source", GOOD + "components:\n  vllm-rs: {enabled: true, provider: distro, source: {path: r}}\n", ":19: components.vllm-rs.source: unknown key"),
    ("rustup-with-toolchain", GOOD + f'components:\n  vllm-rs: {{enabled: true, toolchain: "1.95", rustup_init: {{url: "https://r.example/i", sha256: "{"a" * 64}"}}}}\n', ":19: components.vllm-rs.toolchain: only applies to the distro provider"),
    ("gpu-arch", GOOD + "musa: {gpu_arch: ph1}\n", ":18: musa.gpu_arch: 'ph1' is not a MUSA GPU architecture like mp_31"),
    ("musa-dotdot", GOOD + "musa: {gpu_arch: mp_31, library_path: [../lib]}\n", ":18: musa.library_path.0: '../lib' is not a directory path"),
    ("gate-twice", GOOD + "gates: {imports: [torch, torch]}\n", ":18: gates.imports.1: torch is listed twice"),
    ("tag-field-as-variable", GOOD + "image: {repository: r.example/v, variables: {release: x}}\n", ":18: image.variables.release: 'release' is a built-in tag field"),
    ("require-signature-a-string", GOOD + "image: {repository: r.example/v, require_signature: 'true', public_key: k.pub}\n", ":18: image.require_signature: must be true or false, got the string 'true'"),
    ("public-key-absolute", GOOD + "image: {repository: r.example/v, public_key: /etc/cosign.pub}\n", ":18: image.public_key: '/etc/cosign.pub' is outside the repository"),
    ("public-key-dotdot", GOOD + "image: {repository: r.example/v, public_key: keys/../../cosign.pub}\n", ":18: image.public_key: 'keys/../../cosign.pub' is outside the repository"),
    ("public-key-empty", GOOD + "image: {repository: r.example/v, public_key: ''}\n", ":18: image.public_key: must not be empty"),
    ("require-signature-without-public-key", GOOD + "image: {repository: r.example/v, require_signature: true}\n", ":18: image: require_signature: true needs public_key: the key a release's signatures are verified with"),
    ("port-zero", GOOD + "serving: {model: {path: /m, name: m}, launch: {port: 0}}\n", ":18: serving.launch.port: must be from 1 to 65535, got 0"),
    ("chat-and-prompt", GOOD + "serving: {model: {path: /m, name: m}, check: {requests: [{name: a, chat: x, prompt: y}]}}\n", ":18: serving.check.requests.0: give exactly one of chat (a user message) or prompt"),
    ("confidence-one", GOOD + "serving: {model: {path: /m, name: m}, ab: {bootstrap: {confidence: 1.0}}}\n", ":18: serving.ab.bootstrap.confidence: must be in [0.5, 1), e.g. 0.95"),
    ("lifetime", GOOD + "serving: {model: {path: /m, name: m}, ab: {order: [A1, C1]}}\n", ":18: serving.ab.order.1: 'C1' is not a lifetime"),
    ("ipc", GOOD + "serving: {model: {path: /m, name: m}, launch: {ipc: shared}}\n", ":18: serving.launch.ipc: 'shared' is not one of host, private"),
    ("no-concurrency", GOOD + "serving: {model: {path: /m, name: m}, ab: {concurrency: []}}\n", ":18: serving.ab.concurrency: must be a non-empty list of integers"),
    ("sdk-apt-missing", GOOD + 'sdk: {from: apt, runtime: "5.2"}\n', ":18: sdk.from: apt installs the SDK from sdk_apt, which the manifest does not have"),
    ("musa-variable-as-build-arg", GOOD + "build:\n  args: {MTGPU_TARGET: mp_31}\nmusa: {gpu_arch: mp_31}\n", ":19: build.args.MTGPU_TARGET: MTGPU_TARGET is set by musa: an ENV of the image, which a build argument of the same name cannot change"),
    ("relative-model-path-without-mount", GOOD + "serving: {model: {path: models/m, name: m}}\n", ":18: serving.model.mount: a relative model.path needs a mount path"),
    ("order-unsupported", GOOD + "serving: {model: {path: /m, name: m}, ab: {order: [A1, A2]}}\n", ":18: serving.ab.order: A1 A2 is not a supported order"),
    ("sdk-base-with-sdk-apt", GOOD + 'sdk_apt: {url: "https://a.example/u", suite: jammy, component: main, key_fingerprint: "' + "A" * 40 + '", packages: [musart-5-2]}\nsdk: {from: base}\n', ":18: sdk_apt: sdk.from is base, so the base image's SDK is kept and sdk_apt would install a second one over it"),
    ("sdk-base-checks-nothing", GOOD + "sdk: {from: base, commands: [], libraries: []}\n", ":18: sdk: from: base with no commands and no libraries checks nothing of the base image's SDK"),
    ("rustup-without-rustup-init", GOOD + "components:\n  vllm-rs: {enabled: true}\n", ":19: components.vllm-rs: the rustup provider needs rustup_init: {url, sha256}"),
    ("distro-with-rustup-init", GOOD + f'components:\n  vllm-rs: {{enabled: true, provider: distro, rustup_init: {{url: "https://r.example/i", sha256: "{"a" * 64}"}}}}\n', ":19: components.vllm-rs.rustup_init: only applies to the rustup provider"),
    ("model-path-outside", GOOD + "serving: {model: {path: ../m, mount: /m, name: m}}\n", ":18: serving.model.path: '../m' must stay under the repository"),
]  # fmt: skip

# What the reader refuses and the schema lets through: rules across keys, or past what a JSON
# Schema can state. docs/manifest.md ("What the schema does not check") lists the same.
GAPS: list[tuple[str, str, str]] = [
    ("vllm-rs-without-its-tree", GOOD + "components:\n  vllm-rs: {enabled: true, provider: distro}\n", ":19: components.vllm-rs: vllm-rs is built from vLLM's tree, the source 'vllm', but sources has no 'vllm' (no sources)"),
    ("pin-on-an-undeclared-index", _replace("index: mthreads, wheel: native", "index: vendor, wheel: native"), ":10: packages.torch.index: 'vendor' is not one of the indexes (mthreads, pypi)"),
    ("default-index-undeclared", _replace("default_index: pypi", "default_index: vendor"), ":8: default_index: 'vendor' is not one of the indexes (mthreads, pypi)"),
    ("requirement-also-pinned", _replace("  - numpy==1.26.4", "  - torch==2.11.0"), ":13: requirements.0: torch is already pinned under packages.torch"),
    ("requirement-a-direct-url", _replace("  - numpy==1.26.4", "  - numpy @ https://files.example/numpy.whl"), ":13: requirements.0: 'numpy @ https://files.example/numpy.whl' is a direct URL; only index requirements are locked"),
    ("line-map-of-a-pin", _replace("compressed-tensors: {follows", "torch: {follows"), ":17: rules.line_map.torch: torch is pinned under packages; line_map chooses its version itself"),
    ("override-not-pep-440", GOOD + "overrides:\n  opencv: {version: latest, reason: x}\n", ":19: overrides.opencv.version: 'latest' is not a PEP 440 version"),
    ("sdk-apt-off-the-runtime-line", GOOD + 'sdk_apt: {url: "https://a.example/u", suite: jammy, component: main, key_fingerprint: "' + "A" * 40 + '", packages: [musart]}\nsdk: {from: apt, runtime: "5.2"}\n', ":18: sdk_apt.packages.0: 'musart' is not pinned to the runtime line 5.2 of sdk.runtime"),
    ("third-party-of-no-source", GOOD + "sources:\n  vllm-musa: {path: p, third_party: {vllm: {source: vllm, pin: VLLM_COMMIT}}}\n", ":19: sources.vllm-musa.third_party.vllm.source: 'vllm' is not another source of this manifest"),
    ("tag-unknown-variable", GOOD + "image: {repository: r.example/v, release_tags: ['v{relase}']}\n", ":18: image.release_tags.0: unknown variable {relase} in 'v{relase}'"),
    ("mirror-of-an-undeclared-index", GOOD + 'mirrors:\n  indexes: {vendor: "https://m.example/simple/"}\n', ":19: mirrors.indexes.vendor: 'vendor' is not one of the indexes (mthreads, pypi)"),
    ("override-of-a-pin", GOOD + 'overrides:\n  torch: {version: "2.9.0", reason: x}\n', ":19: overrides.torch.version: '2.9.0' is not the version packages.torch pins ('2.11.0.post2+musa5.2.0'); an override of a pin declares the pin's own version"),
    ("mooncake-also-pinned", GOOD + 'components:\n  mooncake: {enabled: true, package: torch, version: "2.11.0", index: mthreads}\n', ":19: components.mooncake.package: torch is also pinned under packages.torch"),
    ("one-project-twice", _replace('  torchada: {version: "0.1.95"', '  Torch: {version: "0.1.95"'), ":11: packages.Torch: 'Torch' is the same project as 'torch'"),
    ("two-products", GOOD + "sources:\n  a: {path: a, product: true}\n  b: {path: b, product: true}\n", ":20: sources.b.product: sources.a is the product already; one source names the image"),
    ("imported-and-located", GOOD + "gates: {imports: [torch], find_spec: [torch]}\n", ":18: gates.find_spec.0: torch is also in gates.imports; a module is either imported or only located"),
    ("log-pattern-not-a-regex", GOOD + "serving: {model: {path: /m, name: m}, check: {log_patterns: ['(']}}\n", ":18: serving.check.log_patterns.0: is not a regular expression: missing ), unterminated subpattern at position 0"),
]  # fmt: skip


# (id, manifest text): the reader and the schema take it
TAKEN: list[tuple[str, str]] = [
    ("unsigned-by-default", GOOD + "image: {repository: r.example/v}\n"),
    ("signed-with-a-key", GOOD + "image: {repository: r.example/v, require_signature: true, public_key: keys/cosign.pub}\n"),
    ("a-key-without-signing", GOOD + "image: {repository: r.example/v, require_signature: false, public_key: ./cosign.pub}\n"),
]  # fmt: skip


def _reader_message(text: str) -> str:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, path=Path("stack/t.yaml"))
    return info.value.message.removeprefix("stack/t.yaml")


def _keypath(message: str) -> list[str]:
    """``:10: packages.torch.wheel: ...`` -> the key path the reader names."""
    where = message.split(": ", 2)[1]
    return [] if where == "(top level)" else where.split(".")


@pytest.mark.parametrize(("name", "text", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_the_reader_and_the_schema_refuse_it(
    validator: jsonschema.Draft202012Validator, name: str, text: str, message: str
) -> None:
    assert _reader_message(text) == message
    keypath = _keypath(message)
    refused = [p.split(".") if p else [] for p in _errors(validator, text)]
    assert refused, f"{name}: the schema accepts what the reader refuses"
    assert list(DRAFT_07.iter_errors(_data(text))), f"{name}: draft-07 reads the schema otherwise"
    # the schema refuses it at the reader's key path, or at a mapping around it
    assert any(keypath[: len(p)] == p or p[: len(keypath)] == keypath for p in refused), refused


@pytest.mark.parametrize(("name", "text"), TAKEN, ids=[c[0] for c in TAKEN])
def test_the_reader_and_the_schema_take_it(
    validator: jsonschema.Draft202012Validator, name: str, text: str
) -> None:
    parse_manifest(text, path=Path("stack/t.yaml"))
    assert _errors(validator, text) == [], name
    assert list(DRAFT_07.iter_errors(_data(text))) == [], name


@pytest.mark.parametrize(("name", "text", "message"), GAPS, ids=[c[0] for c in GAPS])
def test_a_known_gap_is_refused_by_the_reader_only(
    validator: jsonschema.Draft202012Validator, name: str, text: str, message: str
) -> None:
    assert _reader_message(text) == message
    assert _errors(validator, text) == [], f"{name}: the schema checks it now; move it to REFUSED"


# the hostile cases the reader refuses past YAML, at a key; the others (aliases, tags, bounds,
# characters) never become data
READ = ("glibc-", "aarch64-glibc-", "python-3.", "python-huge", "python-arabic-digits")
READ_CASES = [
    c
    for c in CASES
    if c[0].startswith(READ) or c[0] in ("empty", "only-comments", "null-key", "top-level-list")
]


@pytest.mark.parametrize(("name", "text", "message"), READ_CASES, ids=[c[0] for c in READ_CASES])
def test_a_hostile_manifest_the_yaml_reader_passes_is_refused_by_the_schema(
    validator: jsonschema.Draft202012Validator, name: str, text: str, message: str
) -> None:
    with pytest.raises(ManifestError):
        parse_manifest(text, path=Path("s.yaml"))
    assert list(validator.iter_errors(_data(text))), f"{name}: the schema accepts it"


def test_the_hostile_base_is_valid(validator: jsonschema.Draft202012Validator) -> None:
    assert _errors(validator, BASE) == []


def _reader_takes(text: str) -> bool:
    try:
        parse_manifest(text, path=Path("s.yaml"))
    except ManifestError:
        return False
    return True


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_the_schema_takes_exactly_the_targets_the_reader_takes(
    validator: jsonschema.Draft202012Validator, arch: str
) -> None:
    target = '{python: "3.12", arch: x86_64, glibc: "2.35"}'
    assert target in BASE
    versions = [f"{major}.{minor}" for major in (2, 3) for minor in range(120)]
    versions += ["2.05", "3.012", "2", "2.35.1", "3.12t", "2.-1"]
    for python in ("3.12", *versions):
        for glibc in ("2.35", *versions) if python == "3.12" else ("2.35",):
            text = BASE.replace(target, f'{{python: "{python}", arch: {arch}, glibc: "{glibc}"}}')
            schema_takes = not list(validator.iter_errors(_data(text)))
            assert schema_takes == _reader_takes(text), (python, arch, glibc)
