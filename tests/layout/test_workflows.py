"""The house rules of .github/workflows/, checked offline on the files themselves.

- Every ``uses:`` names a commit: ``OWNER/REPO[/PATH]@<40 hex> # vX.Y.Z``. A tag can be moved
  under us; the comment says which release the SHA is, and Renovate moves both together.
- Every runner label is one actionlint knows or is declared in .github/actionlint.yaml (and
  every declared label is used), and so is every repository variable (``vars.NAME``).
- No workflow command GitHub has switched off (``::set-output`` and friends).
- ``make lint`` checks each workflow against GitHub's workflow schema (check-jsonschema's
  vendored copy): one test shows that a broken workflow fails it.

actionlint itself is not installable here; these rules are the part of it this repository
relies on.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
ACTIONLINT = REPO / ".github" / "actionlint.yaml"
CHECK_JSONSCHEMA = Path(sys.executable).with_name("check-jsonschema")

USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?:\s+#\s*(?P<comment>.*?))?\s*$")
PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(?:/[^@\s]+)?@[0-9a-f]{40}$")
RELEASE = re.compile(r"^v\d+\.\d+\.\d+$")
# the labels actionlint knows without configuration (its self-hosted set), and GitHub's
# hosted images (ubuntu-24.04, ubuntu-latest, ...)
KNOWN_LABELS = frozenset({"self-hosted", "linux", "macos", "windows", "x64", "arm", "arm64"})
HOSTED_LABEL = re.compile(r"^(?:ubuntu|windows|macos)-(?:latest|\d[\w.-]*)$")
VARS = re.compile(r"\bvars\.([A-Za-z_][A-Za-z0-9_]*)")
SWITCHED_OFF = ("::set-output", "::save-state", "::set-env", "::add-path")
NOT_PINNED = "not pinned by a full commit SHA (OWNER/REPO@<40 hex>)"
NO_RELEASE = "no '# vX.Y.Z' comment naming the release of the SHA"


def uses_problems(text: str, where: str) -> list[str]:
    """What is wrong with the ``uses:`` lines of a workflow's text (empty: nothing)."""
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        m = USES_LINE.match(line)
        if m is None:
            continue
        ref, comment = m["ref"], m["comment"]
        at = f"{where}:{number}: uses: {ref}"
        if ref.startswith("./"):
            continue  # an action of this repository, at the checked-out commit
        if not PINNED.match(ref):
            problems.append(f"{at}: {NOT_PINNED}")
        elif comment is None or not RELEASE.match(comment):
            problems.append(f"{at}: {NO_RELEASE}")
    return problems


def _uses_in(doc: Mapping[str, Any]) -> Iterator[str]:
    for job in (doc.get("jobs") or {}).values():
        if "uses" in job:  # a reusable workflow
            yield str(job["uses"])
        for step in job.get("steps") or []:
            if "uses" in step:
                yield str(step["uses"])


def runner_labels(doc: Mapping[str, Any], where: str) -> dict[str, list[str]]:
    """The runner labels of each job; an expression cannot be checked and is refused."""
    out = {}
    for name, job in (doc.get("jobs") or {}).items():
        runs_on = job.get("runs-on")
        if runs_on is None:
            continue  # a job that calls a reusable workflow
        if isinstance(runs_on, Mapping):
            runs_on = runs_on.get("labels", [])
        labels = [runs_on] if isinstance(runs_on, str) else list(runs_on)
        for label in labels:
            if "${{" in str(label):
                raise AssertionError(
                    f"{where}: jobs.{name}.runs-on: {label}: an expression; name the labels"
                )
        out[name] = [str(label) for label in labels]
    return out


def label_problems(labels: Mapping[str, list[str]], declared: set[str], where: str) -> list[str]:
    return [
        f"{where}: jobs.{job}.runs-on: {label}: not declared in .github/actionlint.yaml "
        "(self-hosted-runner.labels)"
        for job, names in labels.items()
        for label in names
        if label not in KNOWN_LABELS and label not in declared and not HOSTED_LABEL.match(label)
    ]


def _actionlint() -> dict[str, Any]:
    doc = yaml.safe_load(ACTIONLINT.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _workflows() -> list[Path]:
    found = sorted(p for p in WORKFLOWS.iterdir() if p.is_file())
    assert found, f"no workflow in {WORKFLOWS}"
    return found


def _load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_workflows_are_yml_files_the_lint_target_reads() -> None:
    assert [p.name for p in _workflows() if p.suffix != ".yml"] == []


@pytest.mark.parametrize("path", _workflows(), ids=lambda p: p.name)
def test_every_uses_is_pinned_by_commit_with_its_release(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert uses_problems(text, _rel(path)) == []
    # every uses: of the document is on a line of its own (none hides in a flow mapping)
    lines = [m["ref"] for line in text.splitlines() if (m := USES_LINE.match(line))]
    assert lines == list(_uses_in(_load(path)))


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("      - uses: actions/checkout@v7", NOT_PINNED),
        ("        uses: actions/checkout@v7.0.1 # v7.0.1", NOT_PINNED),
        ("      - uses: actions/checkout@3d3c42e # v7.0.1", NOT_PINNED),
        ("      - uses: actions/checkout@main", NOT_PINNED),
        ("      - uses: docker://alpine:3", NOT_PINNED),
        (
            "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1",
            NO_RELEASE,
        ),
        (
            "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7",
            NO_RELEASE,
        ),
    ],
)
def test_a_movable_or_unnamed_pin_is_refused(line: str, problem: str) -> None:
    ref = line.split("uses: ", 1)[1].split(" ", 1)[0]
    assert uses_problems(f"steps:\n{line}\n", "w.yml") == [f"w.yml:2: uses: {ref}: {problem}"]


def test_a_pinned_and_named_uses_and_a_local_action_pass() -> None:
    text = (
        "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1\n"
        "      - uses: ./.github/actions/setup\n"
        "    uses: octo/reusable/.github/workflows/x.yml@"
        "043fb46d1a93c77aae656e7c1c64a875d1fc6a0a  #  v1.2.3\n"
    )
    assert uses_problems(text, "w.yml") == []


def test_runner_labels_are_declared_and_every_declared_label_is_used() -> None:
    declared = set(_actionlint()["self-hosted-runner"]["labels"])
    used: set[str] = set()
    for path in _workflows():
        labels = runner_labels(_load(path), _rel(path))
        assert label_problems(labels, declared, _rel(path)) == []
        used.update(label for names in labels.values() for label in names)
    assert sorted(declared - used) == []


def test_an_undeclared_label_is_refused() -> None:
    doc = {"jobs": {"a": {"runs-on": ["self-hosted", "musa", "s4000"]}, "b": {"runs-on": "x"}}}
    labels = runner_labels(doc, "w.yml")
    assert label_problems(labels, {"musa"}, "w.yml") == [
        "w.yml: jobs.a.runs-on: s4000: not declared in .github/actionlint.yaml "
        "(self-hosted-runner.labels)",
        "w.yml: jobs.b.runs-on: x: not declared in .github/actionlint.yaml "
        "(self-hosted-runner.labels)",
    ]
    hosted = runner_labels({"jobs": {"c": {"runs-on": "ubuntu-24.04"}}}, "w.yml")
    assert label_problems(hosted, set(), "w.yml") == []


def test_a_runner_label_expression_is_refused() -> None:
    doc = {"jobs": {"a": {"runs-on": "${{ matrix.os }}"}}}
    with pytest.raises(AssertionError) as info:
        runner_labels(doc, "w.yml")
    assert (
        str(info.value) == "w.yml: jobs.a.runs-on: ${{ matrix.os }}: an expression; name the labels"
    )


def test_repository_variables_are_declared() -> None:
    declared = set(_actionlint()["config-variables"])
    used = {v for p in _workflows() for v in VARS.findall(p.read_text(encoding="utf-8"))}
    assert sorted(used - declared) == []
    assert sorted(declared - used) == []


@pytest.mark.parametrize("path", _workflows(), ids=lambda p: p.name)
def test_no_switched_off_workflow_command(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert [c for c in SWITCHED_OFF if c in text] == []


def test_the_workflow_schema_refuses_a_job_without_runs_on(tmp_path: Path) -> None:
    if not CHECK_JSONSCHEMA.is_file():
        pytest.fail(f"{CHECK_JSONSCHEMA} is missing: `make dev` installs check-jsonschema")
    text = (WORKFLOWS / "nightly-image.yml").read_text(encoding="utf-8")
    broken = tmp_path / "nightly-image.yml"
    broken.write_text(re.sub(r"(?m)^    runs-on:", "    runs_on:", text), encoding="utf-8")
    result = subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.github-workflows", str(broken)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "$.jobs.nightly: 'runs-on' is a required property" in result.stdout


def _first_lock_step() -> str:
    workflow = yaml.safe_load((WORKFLOWS / "nightly-image.yml").read_text())
    steps = workflow["jobs"]["nightly"]["steps"]
    (step,) = [s for s in steps if s.get("name") == "The stack has its committed lock and render"]
    script: str = step["run"]
    return script


def test_the_nightly_job_stops_in_one_line_until_a_stack_has_its_first_lock(
    tmp_path: Path,
) -> None:
    stack = tmp_path / "stack" / "s.yaml"
    stack.parent.mkdir()
    stack.write_text("schema: 1\n")
    run = subprocess.run(
        ["bash", "-c", _first_lock_step()],
        env={"STACK": str(stack), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    d = stack.parent
    assert (run.returncode, run.stdout) == (
        1,
        f"::error file={stack}::{stack} has no committed lock or render: on a host that reaches "
        f"the vendor index run `build_image.py lock {stack} --index mthreads=URL && "
        f"build_image.py pin-base {stack} && build_image.py render {stack} --out "
        f"{d}/s.Dockerfile`, then commit {stack}, {d}/s.lock and {d}/s.Dockerfile\n",
    )
    (d / "s.lock").mkdir()
    (d / "s.lock" / "pylock.toml").write_text("")
    (d / "s.Dockerfile").write_text("")
    run = subprocess.run(
        ["bash", "-c", _first_lock_step()],
        env={"STACK": str(stack), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (run.returncode, run.stdout) == (0, "")


# ------------------------------------------------------------------ the nightly's two lines

LINES = ["stack/vllm-musa-0.28.0-py312.yaml", "stack/vllm-musa-0.28.0-py310.yaml"]
NIGHTLY_MATRIX = re.compile(
    r"\$\{\{ fromJSON\(github\.event_name == 'workflow_dispatch' && "
    r"format\('\[\{0\}\]', toJSON\(github\.event\.inputs\.stack\)\) \|\| "
    r"'(?P<scheduled>\[[^']*\])'\) \}\}"
)


def _nightly_job() -> dict[str, Any]:
    job: dict[str, Any] = _load(WORKFLOWS / "nightly-image.yml")["jobs"]["nightly"]
    return job


def _step(job: Mapping[str, Any], step_id: str) -> dict[str, Any]:
    (step,) = [s for s in job["steps"] if s.get("id") == step_id]
    return dict(step)


def _run_step(script: str, stack: str, tmp_path: Path) -> dict[str, str]:
    """The outputs a step's script writes for ``stack``, run as the runner runs it."""
    out = tmp_path / "github-output"
    out.write_text("")
    env = {"STACK": stack, "PY": sys.executable, "GITHUB_OUTPUT": str(out), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        ["bash", "-e", "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
        check=False, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return dict(line.split("=", 1) for line in out.read_text().splitlines())


def test_the_schedule_builds_both_lines_and_a_manual_run_the_stack_it_names() -> None:
    job = _nightly_job()
    m = NIGHTLY_MATRIX.fullmatch(job["strategy"]["matrix"]["stack"])
    assert m is not None, job["strategy"]["matrix"]
    assert json.loads(m["scheduled"]) == LINES
    # every vLLM-MUSA stack shipped is a line of the nightly
    shipped = sorted(f"stack/{p.name}" for p in (REPO / "stack").glob("vllm-musa-*.yaml"))
    assert sorted(LINES) == shipped
    assert job["strategy"]["fail-fast"] is False
    assert job["env"]["STACK"] == "${{ matrix.stack }}"
    doc = _load(WORKFLOWS / "nightly-image.yml")
    on: dict[Any, Any] = doc[True]  # type: ignore[index]  # YAML 1.1 reads `on` as True
    dispatch = on["workflow_dispatch"]["inputs"]["stack"]
    assert dispatch["default"] == LINES[0]
    # one run per stack at a time, never cut in half; none for the workflow as a whole
    assert job["concurrency"] == {
        "group": "nightly-image-${{ matrix.stack }}",
        "cancel-in-progress": False,
    }
    assert "concurrency" not in doc
    assert "STACK" not in doc["env"]


def test_no_two_lines_share_a_tag_a_release_record_or_an_artifact(tmp_path: Path) -> None:
    from images.publish.push import plan_tags
    from manifest import load_manifest

    job = _nightly_job()
    upload = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload"))
    name = upload["with"]["name"]
    assert name == "release-record-${{ steps.line.outputs.stem }}-${{ github.run_id }}"
    tags: dict[str, list[str]] = {}
    seen: dict[str, tuple[str, str, str]] = {}
    for stack in LINES:
        m = load_manifest(REPO / stack)
        assert m.image is not None
        for channel in ("release", "nightly"):
            for tag in plan_tags(m, target="vllm-openai", channel=channel, date="20260101"):
                tags.setdefault(stack, []).append(f"{m.image.repository}:{tag}")
        stem = _run_step(_step(job, "line")["run"], stack, tmp_path)["stem"]
        record = _run_step(_step(job, "record")["run"], stack, tmp_path)["path"]
        artifact = name.replace("${{ steps.line.outputs.stem }}", stem)
        seen[stack] = (stem, record, artifact)
    repo = "registry.mthreads.com/mcconline/inference/vllm"
    assert tags == {
        LINES[0]: [
            f"{repo}:v0.28.0-amd64-ph1-musa5.2.0",
            f"{repo}:nightly",
            f"{repo}:nightly-20260101",
        ],
        LINES[1]: [
            f"{repo}:v0.28.0-amd64-ph1-musa5.2.0-py3.10",
            f"{repo}:nightly-py3.10",
            f"{repo}:nightly-py3.10-20260101",
        ],
    }
    assert set(tags[LINES[0]]).isdisjoint(tags[LINES[1]])
    assert seen == {
        LINES[0]: (
            "vllm-musa-0.28.0-py312",
            "releases/vllm-musa-0.28.0-py312.json",
            "release-record-vllm-musa-0.28.0-py312-${{ github.run_id }}",
        ),
        LINES[1]: (
            "vllm-musa-0.28.0-py310",
            "releases/vllm-musa-0.28.0-py310.json",
            "release-record-vllm-musa-0.28.0-py310-${{ github.run_id }}",
        ),
    }
    # each artifact carries its own line's record, reports and A/B only
    assert upload["with"]["path"].splitlines() == [
        "${{ steps.record.outputs.path }}",
        "build/reports/${{ steps.line.outputs.stem }}-*.json",
        "build/serve-check/",
        "build/ab/nightly-${{ steps.line.outputs.stem }}-${{ github.run_id }}/",
    ]
    ab = next(s["run"] for s in job["steps"] if str(s.get("name", "")).startswith("A/B "))
    assert ab.startswith('stem=$(basename "$STACK" .yaml)\n')
    assert '--out "build/ab/nightly-$stem-${{ github.run_id }}"' in ab
