"""The command line's one boundary (``build_image.main``): every way a run can go wrong ends
in one ``error[code]: message`` and an exit code, never a traceback (unless ``-v`` asks).

- a bad flag value, or an option shortened (``--lo`` for ``--lock``): ``error[usage]``, exit 2,
  before any work;
- a path the run cannot use (a --cache-dir or --out under a file, or not writable):
  ``error[environment]``, exit 2, naming the flag;
- what else the machine refuses: ``error[os]`` (the path and the system's reason),
  ``error[memory]``, ``error[recursion]``, exit 1;
- anything else, a bug: ``error[internal]``, exit 1, with what a report needs; the traceback
  under ``-v`` only (before or after COMMAND); Ctrl-C exits 130.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from build_image import main
from tests.support.lockcase import Case

REPO = Path(__file__).resolve().parents[1]
SECRET = "s3cr3t-t0ken"


def unprivileged(tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The tool in a subprocess that file permissions apply to: as root, without the
    capabilities that override them (setpriv); otherwise as this user."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: permissions cannot be tested")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]
    code = "import sys, build_image; sys.exit(build_image.main(sys.argv[1:]))"
    return subprocess.run(
        [*prefix, sys.executable, "-c", code, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def read_only_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    path.chmod(0o555)
    return path


# ----------------------------------------------------------------------------- flag values


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["lock", "s.yaml", "--timeout", "0"], "argument --timeout: '0' is not a positive, finite number of seconds"),
        (["lock", "s.yaml", "--timeout", "-5"], "argument --timeout: '-5' is not a positive, finite number of seconds"),
        (["lock", "s.yaml", "--timeout", "nan"], "argument --timeout: 'nan' is not a positive, finite number of seconds"),
        (["lock", "s.yaml", "--timeout", "inf"], "argument --timeout: 'inf' is not a positive, finite number of seconds"),
        (["lock", "s.yaml", "--timeout", "1e999"], "argument --timeout: '1e999' is not a positive, finite number of seconds"),
        (["lock", "s.yaml", "--timeout", "soon"], "argument --timeout: 'soon' is not a number of seconds"),
        (["lock", "s.yaml", "--retries", "-1"], "argument --retries: '-1' is less than zero"),
        (["lock", "s.yaml", "--retries", "1.5"], "argument --retries: '1.5' is not a whole number"),
        (["explain", "s.yaml", "torch", "--timeout", "0"], "argument --timeout: '0' is not a positive, finite number of seconds"),
        (["fetch", "s.yaml", "--retries", "-2"], "argument --retries: '-2' is less than zero"),
        (["publish", "s.yaml", "--target", "final", "--timeout", "-1"], "argument --timeout: '-1' is not a positive, finite number of seconds"),
        (["pin", "r:1", "--timeout", "nan"], "argument --timeout: 'nan' is not a positive, finite number of seconds"),
    ],
)  # fmt: skip
def test_a_bad_flag_value_is_a_usage_error(case: Case, argv: list[str], problem: str) -> None:
    result = case.run(*argv)
    command = argv[0]
    assert (result.code, result.out, result.err) == (
        2,
        "",
        f"error[usage]: build_image.py {command}: {problem}\n"
        f"hint: `build_image.py {command} --help` lists the options\n",
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["why", "s.yaml", "filelock", "--lo", "DIR"],  # not --lock
        ["lock", "s.yaml", "--cache", "DIR"],  # not --cache-dir
        ["--verb", "why", "s.yaml", "filelock"],  # not --verbose
    ],
)
def test_an_option_is_never_guessed_from_its_first_letters(case: Case, argv: list[str]) -> None:
    result = case.run(*argv)
    shown = " ".join(a for a in argv if a.startswith("--") or a == "DIR")
    assert (result.code, result.out, result.err) == (
        2,
        "",
        f"error[usage]: build_image.py: unrecognized arguments: {shown}\n"
        "hint: `build_image.py --help` lists the options\n",
    )


def test_a_wrong_command_line_is_a_usage_error(case: Case) -> None:
    result = case.run("lokc")
    assert result.code == 2
    assert result.err.startswith(
        "error[usage]: build_image.py: argument COMMAND: invalid choice: 'lokc' (choose from "
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "s.yaml", "--target", "vllm_openai"],
        ["publish", "s.yaml", "--target", "vllm_openai"],
        ["bake", "s.yaml", "--target", "final", "--target", "vllm_openai"],
        ["rollback", "s.yaml", "--target", "vllm_openai"],
    ],
)
def test_every_target_flag_takes_a_build_target_only(case: Case, argv: list[str]) -> None:
    result = case.run(*argv)
    command = argv[0]
    assert (result.code, result.out, result.err) == (
        2,
        "",
        f"error[usage]: build_image.py {command}: argument --target: invalid choice: "
        "'vllm_openai' (choose from 'final', 'vllm-openai')\n"
        f"hint: `build_image.py {command} --help` lists the options\n",
    )


# ----------------------------------------------------------------------------- -q and -v


def _noted(case: Case) -> Path:
    """A stack whose lock prints a note (a bound name the public index also has)."""
    case.publish(case.vendor, case.wheel("mate", "0.2.7"))
    case.publish(case.pypi, case.wheel("mate", "9.9.9"))
    return case.stack('  mate: {version: "0.2.7", index: mthreads, wheel: pure}')


NOTE = (
    "note: mate is bound to index mthreads; index pypi also has a project named mate, "
    "which this stack never uses\n"
)


@pytest.mark.parametrize(
    "flags", [["-q"], ["--quiet"], ["AFTER", "-q"], ["-v", "AFTER", "-q"], ["-v", "-q"]]
)
def test_quiet_prints_the_result_only(case: Case, flags: list[str]) -> None:
    stack = _noted(case)
    before = flags[: flags.index("AFTER")] if "AFTER" in flags else flags
    after = flags[flags.index("AFTER") + 1 :] if "AFTER" in flags else []
    result = case.run(*before, "lock", stack, "--cache-dir", case.cache, *after)
    assert (result.code, result.err) == (0, "")
    assert (
        result.out
        == f"locked 1 packages for CPython 3.12 (cp312), linux x86_64, glibc 2.35 -> {case.lock_dir()}\n"
    )


def test_quiet_still_prints_errors(case: Case) -> None:
    stack = case.stack(requirements=["nothing-here"])
    result = case.run("-q", "lock", stack, "--cache-dir", case.cache, "--retries", "0")
    assert result.code == 1
    assert result.err.startswith("error[")


def test_the_default_prints_notes_and_verbose_adds_details(case: Case) -> None:
    stack = _noted(case)
    assert case.run("lock", stack).err == NOTE
    result = case.run("lock", stack, "-v")
    assert result.code == 0
    assert result.err == (
        "network: 2 index pages read (0 fresh in the cache, 2 not modified), 0 downloads, "
        "0 metadata files, 0 range reads\n"
        "search: replayed (it read no index page)\n" + NOTE
    )


# ----------------------------------------------------------------------------- credentials


@pytest.mark.parametrize(
    ("url", "shown", "problem"),
    [
        (f"https//u:{SECRET}@127.0.0.1/simple/", "https//***@127.0.0.1/simple/",
         "is not a URL (it does not start with https:// or http://)"),
        (f"u:{SECRET}@127.0.0.1/simple/", "***@127.0.0.1/simple/",
         "is not a URL (it does not start with https:// or http://)"),
        (f"https://u:{SECRET}@127.0.0.1:99999/simple/", "https://***@127.0.0.1:99999/simple/",
         "is not a valid URL (its port is not a number from 0 to 65535)"),
        (f"https://u:{SECRET}@[::1/simple/", "https://***@[::1/simple/",
         "is not a valid URL (its [IPv6] host is not closed or is not an address)"),
    ],
)  # fmt: skip
def test_a_typo_in_a_credentialed_index_never_shows_the_secret(
    case: Case, url: str, shown: str, problem: str
) -> None:
    result = case.run("lock", case.stack(), "--index", f"mthreads={url}")
    assert (result.code, result.err) == (
        2,
        f"error[usage]: index mthreads: {shown} {problem}\nhint: write an index URL as "
        "https://HOST[:PORT]/PATH/, with any credentials as USER:TOKEN@ before HOST\n",
    )


# ----------------------------------------------------------------------------- --out and the cache


def test_out_under_a_file_is_refused_before_the_work(case: Case) -> None:
    (case.tmp / "a-file").write_text("x")
    result = case.run("lock", case.stack(), "--out", case.tmp / "a-file" / "lock")
    assert (result.code, result.err) == (
        2,
        f"error[environment]: {case.tmp / 'a-file' / 'lock'} cannot be created: {case.tmp / 'a-file'} "
        "is a file, not a directory\nhint: choose another --out DIR\n",
    )
    assert case.pypi.requests == []


def test_out_that_is_a_dangling_link_is_refused_before_the_work(case: Case) -> None:
    out = case.tmp / "lock-link"
    out.symlink_to(case.tmp / "nowhere")
    result = case.run("lock", case.stack(), "--out", out)
    assert (result.code, result.err) == (
        2,
        f"error[environment]: --out {out} cannot be used: it is a symbolic link (to "
        f"{case.tmp / 'nowhere'}); writing the lock replaces the whole directory, so it would "
        "replace the link\n"
        "hint: give the real directory as --out, or remove the link\n",
    )
    assert not (case.tmp / "nowhere").exists()
    assert case.pypi.requests == []


def test_the_default_lock_dir_as_a_link_names_the_flag_that_moves_it(case: Case) -> None:
    stack = case.stack()
    (case.tmp / "elsewhere").mkdir()
    case.lock_dir().symlink_to(case.tmp / "elsewhere")
    result = case.run("lock", stack)
    assert (result.code, result.out, result.err) == (
        2,
        "",
        f"error[environment]: the lock directory {case.lock_dir()} (the default; --out chooses "
        f"another) cannot be used: it is a symbolic link (to {case.tmp / 'elsewhere'}); writing "
        "the lock replaces the whole directory, so it would replace the link\n"
        "hint: give the real directory as --out, or remove the link\n",
    )
    assert case.pypi.requests == []


def _out_of_each_kind(tmp: Path, kind: str) -> tuple[Path, str, str]:
    """An --out that is not a directory, of ``kind``: (the path, the reason the refusal
    gives, its hint)."""
    (tmp / "a-file").write_text("x")
    (tmp / "a-dir").mkdir()
    if kind == "file":
        return tmp / "a-file", "it exists and is not a directory", "choose another --out DIR"
    link = tmp / "a-link"
    link.symlink_to(tmp / ("a-file" if kind == "link to a file" else "a-dir"))
    return (
        link,
        f"it is a symbolic link (to {link.readlink()}); writing WHAT replaces the whole "
        "directory, so it would replace the link",
        "give the real directory as --out, or remove the link",
    )


@pytest.mark.parametrize("kind", ["file", "link to a file", "link to a directory"])
def test_lock_out_that_is_no_directory_is_one_environment_error(case: Case, kind: str) -> None:
    out, reason, hint = _out_of_each_kind(case.tmp, kind)
    result = case.run("lock", case.stack(), "--out", out)
    assert (result.code, result.out, result.err) == (
        2,
        "",
        f"error[environment]: --out {out} cannot be used: "
        f"{reason.replace('WHAT', 'the lock')}\nhint: {hint}\n",
    )
    assert (case.tmp / "a-file").read_text() == "x"
    assert list((case.tmp / "a-dir").iterdir()) == []
    assert case.pypi.requests == []


@pytest.mark.parametrize("kind", ["file", "link to a file", "link to a directory"])
def test_stage_out_that_is_no_directory_is_one_environment_error(tmp_path: Path, kind: str) -> None:
    out, reason, hint = _out_of_each_kind(tmp_path, kind)
    err = io.StringIO()
    argv = ["stage", str(REPO / "stack/demo-v028.yaml"), "--target", "vllm-openai"]
    code = main([*argv, "--out", str(out), "--cache-dir", str(tmp_path / "cache")], err=err)
    assert (code, err.getvalue()) == (
        2,
        f"error[environment]: --out {out} cannot be used: "
        f"{reason.replace('WHAT', 'the build context')}\nhint: {hint}\n",
    )
    assert (tmp_path / "a-file").read_text() == "x"
    assert list((tmp_path / "a-dir").iterdir()) == []


def test_out_in_a_directory_that_cannot_be_written_is_refused(case: Case) -> None:
    parent = read_only_dir(case.tmp / "read-only")
    stack = case.stack()
    result = unprivileged(case.tmp, "lock", str(stack), "--out", str(parent / "lock"))
    assert (result.returncode, result.stderr) == (
        2,
        f"error[environment]: {parent / 'lock'} cannot be created: this user may not write to "
        f"{parent}\nhint: choose another --out DIR, or fix the permissions of that directory\n",
    )


def test_a_read_only_cache_dir_is_an_environment_error(case: Case) -> None:
    case.publish(case.pypi, case.wheel("filelock", "3.17.0"))
    cache = read_only_dir(case.tmp / "ro-cache")
    stack = case.stack(requirements=["filelock"])
    result = unprivileged(case.tmp, "lock", str(stack), "--cache-dir", str(cache))
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr == (
        f"error[environment]: --cache-dir {cache} cannot be used: cannot create a file in it: "
        "Permission denied (EACCES)\n"
        "hint: check the permissions of that path, or choose another --cache-dir\n"
    )
    assert not (case.lock_dir()).exists()
    assert case.pypi.requests == []  # refused before the work


def test_a_cache_dir_under_a_file_is_an_environment_error_before_the_work(case: Case) -> None:
    (case.tmp / "a-file").write_text("x")
    cache = case.tmp / "a-file" / "cache"
    result = case.run("lock", case.stack(requirements=["filelock"]), "--cache-dir", cache)
    assert (result.code, result.out, result.err) == (
        2,
        "",
        f"error[environment]: --cache-dir {cache} cannot be used: cannot create the directory "
        f"{cache}: Not a directory (ENOTDIR)\n"
        "hint: a part of that path is a file, not a directory: choose another --cache-dir\n",
    )
    assert case.pypi.requests == []


NO_DIRECTORY_THERE = (
    "hint: the filesystem there takes no new directory (as /proc does): choose another "
    "--cache-dir\n"
)


def _unusable_cache(tmp: Path, kind: str) -> tuple[Path, str, str]:
    """A --cache-dir that cannot be used, of ``kind``: (the path, the reason, the hint)."""
    if kind == "in /proc":
        cache = Path("/proc/nope")
        return (
            cache,
            f"cannot create the directory {cache}: No such file or directory (ENOENT)",
            (NO_DIRECTORY_THERE),
        )
    (tmp / "a-file").write_text("x")
    if kind == "under a file":
        cache = tmp / "a-file" / "cache"
        return (
            cache,
            f"cannot create the directory {cache}: Not a directory (ENOTDIR)",
            ("hint: a part of that path is a file, not a directory: choose another --cache-dir\n"),
        )
    cache = tmp / "a-file"
    return (
        cache,
        f"cannot create the directory {cache}: File exists (EEXIST)",
        ("hint: a file is in the way where a directory must be: choose another --cache-dir\n"),
    )


@pytest.mark.parametrize("kind", ["in /proc", "under a file", "a file"])
@pytest.mark.parametrize("command", ["lock", "explain", "fetch", "stage", "build"])
def test_every_unusable_cache_dir_is_one_environment_error(
    tmp_path: Path, command: str, kind: str
) -> None:
    cache, reason, hint = _unusable_cache(tmp_path, kind)
    stack = str(REPO / "stack/demo-v028.yaml")
    argv = {
        "lock": ["lock", stack, "--out", str(tmp_path / "lock")],
        "explain": ["explain", stack, "vllm"],
        "fetch": ["fetch", stack],
        "stage": ["stage", stack, "--target", "final", "--out", str(tmp_path / "context")],
        "build": ["build", stack, "--target", "final", "--build-report", str(tmp_path / "r")],
    }[command]
    out, err = io.StringIO(), io.StringIO()
    code = main([*argv, "--cache-dir", str(cache)], out=out, err=err)
    assert (code, out.getvalue(), err.getvalue()) == (
        2,
        "",
        f"error[environment]: --cache-dir {cache} cannot be used: {reason}\n{hint}",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == (["a-file"] if "file" in kind else [])


def test_the_default_cache_under_a_file_names_the_flag_that_moves_it(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    (case.tmp / "a-file").write_text("x")
    monkeypatch.setenv("BUILD_IMAGE_CACHE_DIR", str(case.tmp / "a-file" / "cache"))
    stack = case.stack(requirements=["filelock"])
    err = io.StringIO()
    code = main(["lock", str(stack)], out=io.StringIO(), err=err)
    cache = case.tmp / "a-file" / "cache"
    assert (code, err.getvalue()) == (
        2,
        f"error[environment]: the cache {cache} (the default; --cache-dir chooses another) "
        f"cannot be used: cannot create the directory {cache}: Not a directory (ENOTDIR)\n"
        "hint: a part of that path is a file, not a directory: choose another --cache-dir\n",
    )


def test_an_out_file_under_a_file_is_an_environment_error(tmp_path: Path) -> None:
    # the committed demo lock renders without an index; the render goes under a file
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / "a-file" / "Dockerfile"
    err = io.StringIO()
    code = main(
        ["render", str(REPO / "stack/demo-v028.yaml"), "--out", str(out)],
        out=io.StringIO(),
        err=err,
    )
    assert (code, err.getvalue()) == (
        2,
        f"error[environment]: --out {out} cannot be used: {out.parent}: File exists (EEXIST)\n"
        "hint: a file is in the way where a directory must be: choose another --out\n",
    )


# ----------------------------------------------------------------------------- memory, recursion, bugs


def _why(case: Case) -> Path:
    case.publish(case.pypi, case.wheel("filelock", "3.17.0"))
    stack = case.stack(requirements=["filelock"])
    assert case.run("lock", stack).code == 0
    return stack


def _raising(exc: BaseException) -> object:
    def why_chains(*_: object) -> Sequence[str]:
        raise exc

    return why_chains


def test_memory_error_anywhere_is_error_memory(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = _why(case)
    monkeypatch.setattr("resolver.explain.why_chains", _raising(MemoryError()))
    result = case.run("why", stack, "filelock")
    assert (result.code, result.err) == (
        1,
        "error[memory]: ran out of memory\nhint: an input (an index page, a wheel, a lock) may "
        "be larger than this machine can hold; free memory or raise the limit and run again, "
        "and if the inputs are ordinary, report it with the command and the output of "
        "`build_image.py -v`\n",
    )


def test_recursion_error_anywhere_is_error_recursion(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = _why(case)

    def why_chains(lock: object, package: str) -> Sequence[str]:
        return why_chains(lock, package)  # a real RecursionError

    monkeypatch.setattr("resolver.explain.why_chains", why_chains)
    result = case.run("why", stack, "filelock")
    assert result.code == 1
    assert re.fullmatch(
        r"error\[recursion\]: an input is nested deeper than Python's recursion limit \(\d+\)\n"
        r"hint: check the inputs for deep nesting; if they are ordinary this is a bug: report it "
        r"with the command and the output of `build_image\.py -v`\n",
        result.err,
    ), result.err


def test_an_unexpected_exception_is_error_internal_with_how_to_report_it(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = _why(case)
    bug = ValueError(f"cannot read https://robot:{SECRET}@index.example/simple/")
    monkeypatch.setattr("resolver.explain.why_chains", _raising(bug))
    result = case.run("why", stack, "filelock")
    assert result.code == 1
    assert SECRET not in result.err
    assert "Traceback" not in result.err
    assert re.fullmatch(
        r"error\[internal\]: unexpected ValueError: cannot read https://\*\*\*@index\.example/"
        r"simple/; this is a bug of build-image, not of your input\n"
        r"hint: please report it with: the command line \(credentials removed\), this message, "
        r"the traceback that `build_image\.py -v COMMAND \.\.\.` prints, and the versions "
        r"\(build-image \S+, Python \d+\.\d+\.\d+\)\n",
        result.err,
    ), result.err


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_adds_the_traceback_redacted(
    case: Case, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    stack = _why(case)
    bug = KeyError(f"https://robot:{SECRET}@index.example/")
    monkeypatch.setattr("resolver.explain.why_chains", _raising(bug))
    argv: list[str | Path] = (
        ["-v", "why", stack, "filelock"]
        if where == "before"
        else ["why", stack, "filelock", "--verbose"]
    )
    result = case.run(*argv)
    assert result.code == 1
    assert result.err.startswith("Traceback (most recent call last):\n")
    assert "in cmd_why\n" in result.err
    assert (
        "KeyError: 'https://***@index.example/'\nerror[internal]: unexpected KeyError" in result.err
    )
    assert SECRET not in result.err


def test_an_os_error_names_the_operation_the_path_and_the_reason(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = _why(case)
    missing = case.tmp / "gone" / "x"

    def why_chains(*_: object) -> Sequence[str]:
        missing.open()
        return []

    monkeypatch.setattr("resolver.explain.why_chains", why_chains)
    result = case.run("why", stack, "filelock")
    assert (result.code, result.err) == (
        1,
        f"error[os]: {missing}: No such file or directory (ENOENT)\n"
        "hint: that path, or a directory or a link on the way to it, does not exist\n",
    )


def test_interrupt_exits_130(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = _why(case)
    monkeypatch.setattr("resolver.explain.why_chains", _raising(KeyboardInterrupt()))
    result = case.run("why", stack, "filelock")
    assert (result.code, result.err) == (130, "interrupted; nothing was written\n")


class _ClosedPipe(io.StringIO):
    """An output whose reader went away (``build_image.py explain ... | head``)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_output_into_a_pipe_closed_early_ends_quietly(case: Case) -> None:
    case.publish(case.pypi, case.wheel("filelock", "3.17.0"))
    stack = case.stack(requirements=["filelock"])
    err = io.StringIO()
    code = main(
        ["explain", str(stack), "filelock", "--cache-dir", str(case.cache)],
        out=_ClosedPipe(),
        err=err,
    )
    assert (code, err.getvalue()) == (1, "")
