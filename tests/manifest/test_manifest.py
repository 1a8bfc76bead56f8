"""The manifest contract: valid stacks parse; every invalid one names file, line, key and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from core.errors import ManifestError
from manifest import load_manifest, parse_manifest

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
schema: 1
name: t
release: "0.28.0"
target: {python: "3.12", arch: x86_64, glibc: "2.35"}
indexes:
  mthreads: {url: "https://vendor.example/simple/"}
  pypi: {url: "https://pypi.org/simple/"}
default_index: pypi
packages:
  torch: {version: "2.11.0.post2+musa5.2.0", index: mthreads, wheel: native}
  torchada: {version: "0.1.95", index: pypi, wheel: pure, deps: false}
requirements:
  - numpy==1.26.4
rules:
  same_line: [[torch, torch-musa]]
  line_map:
    compressed-tensors: {follows: torch, versions: {"2.9": "0.15.0", "2.11": "0.17.0"}}
"""


def parse(text: str) -> object:
    return parse_manifest(text, path=Path("stack/t.yaml"))


def error_of(text: str) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        parse(text)
    return info.value


def test_good_manifest_parses() -> None:
    m = parse_manifest(GOOD, path=Path("stack/t.yaml"))
    assert m.target.python == (3, 12)
    assert m.target.glibc == (2, 35)
    pins = {str(k): v for k, v in m.packages.items()}
    assert str(pins["torch"].version) == "2.11.0.post2+musa5.2.0"
    assert pins["torchada"].deps is False
    assert m.rules.line_map[0].versions == {"2.9": "0.15.0", "2.11": "0.17.0"}
    assert m.default_lock_dir() == Path("stack/t.lock")


def test_shipped_stacks_parse() -> None:
    for stem, python in (("vllm-musa-0.28.0-py312", (3, 12)), ("vllm-musa-0.28.0-py310", (3, 10))):
        m = load_manifest(REPO / "stack" / f"{stem}.yaml")
        assert m.target.python == python
        kinds: dict[str, str | None] = {n: p.wheel for n, p in m.packages.items()}
        assert kinds["torch"] == kinds["triton"] == kinds["deep-ep"] == "native"
        assert kinds["tilelang-musa"] == "abi3"
        assert kinds["mate"] == kinds["flash-mla"] == kinds["sageattention"] == "pure"
        assert m.packages[canonicalize_name("torchada")].deps is False


def test_lock_inputs_hash_ignores_comments_but_not_pins() -> None:
    a = parse_manifest(GOOD, path=Path("stack/t.yaml"))
    b = parse_manifest("# a comment\n" + GOOD, path=Path("stack/t.yaml"))
    c = parse_manifest(GOOD.replace("1.26.4", "1.26.3"), path=Path("stack/t.yaml"))
    assert a.lock_inputs_sha256 == b.lock_inputs_sha256
    assert a.lock_inputs_sha256 != c.lock_inputs_sha256


def test_float_python_is_refused_with_line_and_hint() -> None:
    err = error_of(GOOD.replace('python: "3.12"', "python: 3.10"))
    assert err.message == "stack/t.yaml:4: target.python: must be a string, got the number 3.1"
    assert err.hint is not None
    assert "quote" in err.hint


def test_duplicate_key_is_refused() -> None:
    text = GOOD.replace(
        "  torchada:", '  torch: {version: "2.9.1", index: mthreads, wheel: native}\n  torchada:'
    )
    err = error_of(text)
    assert err.message == "stack/t.yaml:11: duplicate key 'torch' (first at line 10)"


def test_unknown_key_gets_did_you_mean() -> None:
    err = error_of(GOOD.replace("  torch: {version", "  torch: {verison"))
    assert err.message == "stack/t.yaml:10: packages.torch.verison: unknown key"
    assert err.hint == "did you mean 'version'?"


def test_unknown_index_is_named() -> None:
    err = error_of(GOOD.replace("index: mthreads, wheel: native", "index: vendor, wheel: native"))
    assert err.message == (
        "stack/t.yaml:10: packages.torch.index: 'vendor' is not one of the indexes (mthreads, pypi)"
    )


def test_wheel_kind_must_be_known() -> None:
    err = error_of(GOOD.replace("wheel: native", "wheel: binary"))
    assert err.message == (
        "stack/t.yaml:10: packages.torch.wheel: 'binary' is not one of native, abi3, pure"
    )


def test_version_must_be_normal_form() -> None:
    err = error_of(GOOD.replace("2.11.0.post2+musa5.2.0", "2.11.0-post2+musa5.2.0"))
    assert err.message == (
        "stack/t.yaml:10: packages.torch.version: '2.11.0-post2+musa5.2.0' is not in normal "
        "form; write '2.11.0.post2+musa5.2.0'"
    )


def test_credentials_in_index_url_are_refused() -> None:
    err = error_of(GOOD.replace("https://vendor.example", "https://bob:s3cret@vendor.example"))
    assert (
        err.message
        == "stack/t.yaml:6: indexes.mthreads.url: credentials do not belong in the manifest"
    )
    assert err.hint == "set BUILD_IMAGE_INDEX_MTHREADS_AUTH=user:token in the environment instead"
    assert "s3cret" not in err.message


def test_requirement_that_is_also_pinned_is_refused() -> None:
    err = error_of(GOOD.replace("  - numpy==1.26.4", "  - torch==2.11.0"))
    assert (
        err.message
        == "stack/t.yaml:13: requirements.0: torch is already pinned under packages.torch"
    )


def test_line_map_versions_are_lines() -> None:
    err = error_of(GOOD.replace('"2.9": "0.15.0"', '"2": "0.15.0"'))
    assert err.message == (
        "stack/t.yaml:17: rules.line_map.compressed-tensors.versions.2: '2' is not a MAJOR.MINOR line"
    )


def test_missing_required_key() -> None:
    err = error_of(GOOD.replace("default_index: pypi\n", ""))
    assert err.message == "stack/t.yaml: (top level): missing required key 'default_index'"


def test_not_yaml() -> None:
    err = error_of("schema: [1\n")
    assert err.message == (
        "stack/t.yaml:2: not valid YAML: while parsing a flow sequence, "
        "expected ',' or ']', but got '<stream end>'"
    )


def test_a_mirror_with_credentials_is_refused_without_showing_them() -> None:
    text = GOOD + 'mirrors:\n  apt: "https://bob:s3cret@mirror.example/debian"\n'
    err = error_of(text)
    assert err.message == (
        "stack/t.yaml:19: mirrors.apt: 'https://***@mirror.example/debian' is not an http(s) URL "
        "without credentials"
    )


def test_a_trailing_newline_never_passes_validation() -> None:
    rev = "a" * 40
    text = GOOD + f'sources:\n  vllm: {{git: "https://g.example/v.git", rev: "{rev}\\n"}}\n'
    err = error_of(text)
    assert err.message == "stack/t.yaml:19: sources.vllm.rev: a value holds the character U+000A"


@pytest.mark.parametrize(
    "url",
    [
        "ext::sh -c touch% /tmp/pwned",
        "--upload-pack=touch /tmp/x",
        "https://tok:en@github.com/a/b.git",
    ],
)
def test_git_sources_take_plain_urls_only(url: str) -> None:
    text = GOOD + f'sources:\n  vllm: {{git: "{url}", rev: "{"a" * 40}"}}\n'
    err = error_of(text)
    assert err.message.startswith("stack/t.yaml:19: sources.vllm.git: ")
    assert err.message.endswith("is not a git URL this tool clones")
    assert "en@" not in err.message


def test_the_readme_example_is_a_valid_manifest() -> None:
    import re

    text = (REPO / "README.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert block is not None
    m = parse_manifest(block.group(1), path=Path("stack/readme.yaml"))
    assert m.name == "vllm-musa-0.28.0-py312"


IMAGE = "image:\n  repository: registry.example/vllm\n"


def test_image_licenses_and_description_default_and_are_read() -> None:
    m = parse_manifest(GOOD + IMAGE, path=Path("stack/t.yaml"))
    assert m.image is not None
    assert (m.image.licenses, m.image.description) == ("Apache-2.0", "")
    text = GOOD + IMAGE + '  licenses: "(Apache-2.0 OR MIT) AND LicenseRef-MooreThreads"\n'
    text += '  description: "vLLM for Moore Threads GPUs"\n'
    m = parse_manifest(text, path=Path("stack/t.yaml"))
    assert m.image is not None
    assert (m.image.licenses, m.image.description) == (
        "(Apache-2.0 OR MIT) AND LicenseRef-MooreThreads",
        "vLLM for Moore Threads GPUs",
    )


def test_image_licenses_that_are_no_spdx_expression_are_refused() -> None:
    err = error_of(GOOD + IMAGE + '  licenses: "Apache-2.0; rm -rf /"\n')
    assert err.message == (
        "stack/t.yaml:20: image.licenses: 'Apache-2.0; rm -rf /' is not an SPDX license expression"
    )
    assert err.hint == (
        'e.g. "Apache-2.0", "Apache-2.0 AND BSD-3-Clause" or '
        '"Apache-2.0 AND LicenseRef-MooreThreads"'
    )


def test_an_image_description_past_its_bound_is_refused() -> None:
    description = '"' + "x" * 513 + '"'
    err = error_of(GOOD + IMAGE + f"  description: {description}\n")
    assert err.message == (
        "stack/t.yaml:20: image.description: must be one line of at most 512 printable characters"
    )
