"""Requirements files of a source: what each kind of line becomes, and every refusal."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from core.errors import SourceError
from sources.requirements_files import (
    BUILD_DROPPED,
    ReadFile,
    logical_lines,
    read_requirements,
)

# vLLM 0.28.0's requirements/common.txt, as the sdist has it
VLLM_COMMON = """\
regex # Replace re for higher-performance regex matching
cachetools
psutil
sentencepiece  # Required for LLaMA tokenizer.
numpy
requests >= 2.26.0
tqdm
blake3
py-cpuinfo
transformers >= 5.5.3
huggingface_hub >= 1.27.0
tokenizers >= 0.21.1  # Required for fast incremental detokenization.
safetensors >= 0.6.2  # MXFP4/MXFP6 dtype support (F8_E8M0, F4) added in 0.6.0: https://github.com/huggingface/safetensors/pull/611
protobuf >= 5.29.6, !=6.30.*, !=6.31.*, !=6.32.*, !=6.33.0.*, !=6.33.1.*, !=6.33.2.*, !=6.33.3.*, !=6.33.4.* # Required by LlamaTokenizer, gRPC. CVE-2026-0994
fastapi[standard] >= 0.133.0, < 0.137.0 # First version supporting Starlette 1.0; < 0.137.0 avoids route-tree change that breaks model-hosting-container-standards handler overrides.
starlette >= 1.0.1 # CVE-2026-48710: Host header injection in < 1.0.1
aiohttp >= 3.13.3
openai >= 2.0.0  # For Responses API with reasoning content
pydantic >= 2.12.0
prometheus_client >= 0.18.0
pillow  # Required for image processing
prometheus-fastapi-instrumentator >= 8.0.0 # v8 unblocks starlette >= 1.0
tiktoken >= 0.6.0  # Required for DBRX tokenizer
lm-format-enforcer == 0.11.3
llguidance >= 1.7.0, < 1.8.0; platform_machine == "x86_64" or platform_machine == "arm64" or platform_machine == "aarch64" or platform_machine == "ppc64le" or platform_machine == "s390x"
outlines_core == 0.2.14
lark == 1.2.2
xgrammar >= 0.2.1, < 1.0.0; platform_machine == "x86_64" or platform_machine == "aarch64" or platform_machine == "arm64" or platform_machine == "s390x" or platform_machine == "ppc64le"
typing_extensions >= 4.10
filelock >= 3.16.1 # need to contain https://github.com/tox-dev/filelock/pull/317
partial-json-parser # used for parsing partial JSON outputs
jsonschema >= 4.23.0 # required for MiniMax M3 tool schema validation
pyzmq >= 25.0.0
msgspec
mistral_common[image] >= 1.11.6
opencv-python-headless >= 4.13.0    # required for video IO
pyyaml
six>=1.16.0; python_version > '3.11' # transitive dependency of pandas that needs to be the latest version for python 3.12
setuptools>=77.0.3,<81.0.0; python_version > '3.11' # Setuptools is used by triton, we need to ensure a modern version is installed for 3.12+ so that it does not try to import distutils, which was removed in 3.12
einops # Required for Qwen2-VL.
compressed-tensors == 0.17.0 # required for compressed-tensors
depyf==0.20.0 # required for profiling and debugging with compilation config
cloudpickle # allows pickling lambda functions in model_executor/models/registry.py
watchfiles # required for http server to monitor the updates of TLS files
python-json-logger # Used by logging as per examples/features/logging_configuration.md
ninja # Required for xgrammar, rocm, tpu, xpu
pybase64 # fast base64 implementation
cbor2 # Required for cross-language serialization of hashable objects
ijson # Required for mistral streaming tool parser
setproctitle # Used to set process names for better debugging and monitoring
openai-harmony >= 0.0.3  # Required for gpt-oss
anthropic >= 0.71.0
model-hosting-container-standards >= 0.1.14, < 1.0.0
mcp
opentelemetry-sdk >= 1.27.0
opentelemetry-api >= 1.27.0
opentelemetry-exporter-otlp >= 1.27.0
opentelemetry-semantic-conventions-ai >= 0.4.1
"""

# vLLM 0.28.0's requirements/build/cuda.txt
VLLM_BUILD_CUDA = """\
# Should be mirrored in pyproject.toml
cmake>=3.26.1
ninja
packaging>=24.2
setuptools>=77.0.3,<81.0.0
setuptools-scm>=8
setuptools-rust>=1.9.0
torch==2.13.0
wheel
jinja2>=3.1.6
regex
build
protobuf >= 5.29.6, !=6.30.*, !=6.31.*, !=6.32.*, !=6.33.0.*, !=6.33.1.*, !=6.33.2.*, !=6.33.3.*, !=6.33.4.*
"""

PROTOBUF = (
    "protobuf!=6.30.*,!=6.31.*,!=6.32.*,!=6.33.0.*,!=6.33.1.*,!=6.33.2.*,!=6.33.3.*,"
    "!=6.33.4.*,>=5.29.6"
)


def tree(files: Mapping[str, str]) -> ReadFile:
    def read(path: str) -> bytes | None:
        text = files.get(path)
        return None if text is None else text.encode("utf-8")

    return read


def listed(files: Mapping[str, str], *paths: str) -> list[tuple[str, str]]:
    got = read_requirements(tree(files), paths, where="sources.vllm")
    return [(r.location, str(r.requirement)) for r in got.requirements]


def refusal(files: Mapping[str, str], *paths: str) -> tuple[str, str | None]:
    with pytest.raises(SourceError) as info:
        read_requirements(tree(files), paths, where="sources.vllm")
    return info.value.message, info.value.hint


def test_vllm_common_txt_reads_every_requirement_with_its_marker() -> None:
    got = listed({"requirements/common.txt": VLLM_COMMON}, "requirements/common.txt")
    assert len(got) == 58
    at = dict(got)
    assert got[0] == ("requirements/common.txt:1", "regex")
    assert at["requirements/common.txt:14"] == PROTOBUF
    assert at["requirements/common.txt:15"] == "fastapi[standard]<0.137.0,>=0.133.0"
    assert at["requirements/common.txt:25"] == (
        'llguidance<1.8.0,>=1.7.0; platform_machine == "x86_64" or platform_machine == "arm64" '
        'or platform_machine == "aarch64" or platform_machine == "ppc64le" or platform_machine '
        '== "s390x"'
    )
    assert at["requirements/common.txt:35"] == "mistral_common[image]>=1.11.6"
    assert at["requirements/common.txt:36"] == "opencv-python-headless>=4.13.0"
    assert at["requirements/common.txt:38"] == 'six>=1.16.0; python_version > "3.11"'
    assert at["requirements/common.txt:39"] == (
        'setuptools<81.0.0,>=77.0.3; python_version > "3.11"'
    )
    assert at["requirements/common.txt:41"] == "compressed-tensors==0.17.0"
    assert got[-1] == ("requirements/common.txt:58", "opentelemetry-semantic-conventions-ai>=0.4.1")


def test_vllm_build_requirements_drop_torch_as_use_existing_torch_does() -> None:
    got = read_requirements(
        tree({"requirements/build/cuda.txt": VLLM_BUILD_CUDA}),
        ["requirements/build/cuda.txt"],
        where="sources.vllm",
        drop=BUILD_DROPPED,
    )
    assert [(r.location, str(r.requirement)) for r in got.requirements] == [
        ("requirements/build/cuda.txt:2", "cmake>=3.26.1"),
        ("requirements/build/cuda.txt:3", "ninja"),
        ("requirements/build/cuda.txt:4", "packaging>=24.2"),
        ("requirements/build/cuda.txt:5", "setuptools<81.0.0,>=77.0.3"),
        ("requirements/build/cuda.txt:6", "setuptools-scm>=8"),
        ("requirements/build/cuda.txt:7", "setuptools-rust>=1.9.0"),
        ("requirements/build/cuda.txt:9", "wheel"),
        ("requirements/build/cuda.txt:10", "jinja2>=3.1.6"),
        ("requirements/build/cuda.txt:11", "regex"),
        ("requirements/build/cuda.txt:12", "build"),
        ("requirements/build/cuda.txt:13", PROTOBUF),
    ]
    assert [(r.location, str(r.requirement)) for r in got.dropped] == [
        ("requirements/build/cuda.txt:8", "torch==2.13.0")
    ]
    assert sorted(BUILD_DROPPED) == ["torch", "torchaudio", "torchvision"]


def test_includes_are_relative_to_the_including_file_and_read_once() -> None:
    files = {
        "requirements/cuda.txt": "-r common.txt\nnumba == 0.65.0 # speculative decoding\n",
        "requirements/common.txt": "numpy\n--requirement=../extra/more.txt\n",
        "extra/more.txt": "-rmore2.txt\nsix; python_version > '3.11'\n",
        "extra/more2.txt": "-r ../requirements/common.txt  # a cycle\nrich\n",
    }
    assert listed(files, "requirements/cuda.txt", "requirements/common.txt") == [
        ("requirements/common.txt:1", "numpy"),
        ("extra/more2.txt:2", "rich"),
        ("extra/more.txt:2", 'six; python_version > "3.11"'),
        ("requirements/cuda.txt:2", "numba==0.65.0"),
    ]


def test_continuations_comments_and_blank_lines() -> None:
    text = (
        "# a comment \\\n"
        "numpy \\\n"
        "  >=1.26 \\\n"
        "  ; python_version >= '3.10'  # trailing\n"
        "\n"
        "   \n"
        "pillow#not-a-comment-without-space\n"
    )
    assert [(line.number, line.text) for line in logical_lines(text)] == [
        (2, "numpy   >=1.26   ; python_version >= '3.10'"),
        (7, "pillow#not-a-comment-without-space"),
    ]


@pytest.mark.parametrize(
    "line",
    [
        "--extra-index-url https://flashinfer.ai/whl/",
        "--extra-index-url=https://flashinfer.ai/whl/",
        "--index-url https://flashinfer.ai/whl/",
        "-i https://flashinfer.ai/whl/",
        "-f https://flashinfer.ai/whl/",
        "--find-links https://flashinfer.ai/whl/",
    ],
)
def test_index_options_are_refused_naming_the_source_file_and_line(line: str) -> None:
    option = line.split("=", maxsplit=1)[0].split(" ", maxsplit=1)[0]
    files = {"requirements/cuda.txt": f"-r common.txt\n# FlashInfer\n{line}\nflashinfer-python\n"}
    files["requirements/common.txt"] = "numpy\n"
    assert refusal(files, "requirements/cuda.txt") == (
        f"sources.vllm: requirements/cuda.txt:3: {option} https://flashinfer.ai/whl/: a "
        "requirements file cannot add or change an index; the indexes come from the manifest, "
        "and ignoring the line would lock something else than the file says",
        "bind the packages that need that index under packages (with an index of the "
        "manifest), or list requirements files without index options",
    )


def test_credentials_in_a_refused_index_url_are_not_shown() -> None:
    message, _ = refusal(
        {"r.txt": "--extra-index-url https://robot:s3cret@idx.example/simple/\n"}, "r.txt"
    )
    assert "s3cret" not in message
    assert message.startswith("sources.vllm: r.txt:1: --extra-index-url https://")


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        (
            "-c constraints.txt\n",
            "sources.vllm: r.txt:1: -c constraints.txt: constraints files are not read; the "
            "lock's versions come from the manifest",
            "put the constraint in the manifest (requirements, packages or overrides)",
        ),
        (
            "-e ./plugin\n",
            "sources.vllm: r.txt:1: -e ./plugin: an editable or direct reference; the lock "
            "takes every distribution from an index of the manifest",
            "build it as a source of the manifest instead",
        ),
        (
            "--pre\n",
            "sources.vllm: r.txt:1: --pre: option --pre is not supported in a requirements file "
            "the lock reads",
            "only requirements and -r includes are read; the other settings come from the manifest",
        ),
        (
            "numpy==1.26.4 --hash=sha256:abcd\n",
            "sources.vllm: r.txt:1: numpy==1.26.4 --hash: options after a requirement are not "
            "supported",
            "the lock records its own hashes and build settings; remove the option",
        ),
        (
            "flash-attn @ https://example.com/flash_attn-2.0-py3-none-any.whl\n",
            "sources.vllm: r.txt:1: flash-attn @ https://example.com/flash_attn-2.0-py3-none-any"
            ".whl: a direct URL; the lock takes every distribution from an index of the manifest",
            "publish flash-attn on an index of the manifest, or pin it under packages",
        ),
        (
            "-r ../../outside.txt\n",
            "sources.vllm: r.txt:1: -r ../../outside.txt leaves the source tree",
            "a requirements file may include files of its own source only",
        ),
        (
            "-r https://example.com/reqs.txt\n",
            "sources.vllm: r.txt:1: -r https://example.com/reqs.txt: only a relative file of the "
            "same source can be included",
            None,
        ),
        (
            "-r missing.txt\n",
            "sources.vllm: missing.txt: no such file in the source (included from r.txt:1)",
            "fix the file name under sources.vllm, or pin the revision that has it",
        ),
    ],
)
def test_refusals(text: str, message: str, hint: str | None) -> None:
    assert refusal({"r.txt": text}, "r.txt") == (message, hint)


def test_a_path_or_url_line_is_not_a_requirement() -> None:
    message, hint = refusal({"r.txt": "numpy\n./wheels/foo-1.0-py3-none-any.whl\n"}, "r.txt")
    assert message.startswith(
        "sources.vllm: r.txt:2: './wheels/foo-1.0-py3-none-any.whl' is not a PEP 508 requirement ("
    )
    assert hint == (
        "a path, a URL or an archive cannot be locked; only name[extras] specifiers ; markers"
    )


def test_a_listed_file_that_is_missing() -> None:
    assert refusal({}, "requirements/common.txt") == (
        "sources.vllm: requirements/common.txt: no such file in the source",
        "fix the file name under sources.vllm, or pin the revision that has it",
    )


def test_a_file_too_large_or_not_utf8() -> None:
    big = {"r.txt": "numpy\n" * 200_000}
    assert refusal(big, "r.txt")[0] == (
        "sources.vllm: r.txt: 1200000 bytes, more than a requirements file may have (1048576)"
    )

    def latin1(path: str) -> bytes | None:
        return "r\xe9gex\n".encode("latin-1")

    with pytest.raises(SourceError) as info:
        read_requirements(latin1, ["r.txt"], where="sources.vllm")
    assert info.value.message == "sources.vllm: r.txt: not UTF-8 text (invalid continuation byte)"
