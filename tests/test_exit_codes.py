"""Exit codes that never lie: bad output paths, Ctrl-C, failed scripts, misplaced options, bad backends.

Every failure of tracediff's own is one line and exit 2 before anything runs
(not a traceback and exit 1, which reads as "divergence"); Ctrl-C is exit 130
with a line naming the partial traces; a failed script says how it failed.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, Result, ctrl_c_as_from_a_terminal, invoke
from tracediff.report.text import render_text
from tracediff.repro.writer import render_result
from tracediff.run.backend_source import defines

ROOT = Path(__file__).resolve().parent.parent
WRONG = "wrong_decomposition:wrong_cos_backend"


def _one_line_error(result: Result, *needles: str) -> str:
    """Exit 2, exactly one line on stderr holding every needle, no traceback, and no run started."""
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert all(needle in lines[0] for needle in needles), lines[0]
    return lines[0]


# -- output paths that cannot be written: one line, exit 2, before any run ---------------------


@pytest.fixture
def regular_file(tmp_path: Path) -> Path:
    """A regular file: nothing can be created under it, not even by root."""
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    return path


@pytest.mark.parametrize(
    "make_args, option",
    [
        (lambda f: ["run", str(FIXTURES / "no_compile.py"), "--backends", "eager,aot_eager", "--out-dir", f"{f}/x"],
         "--out-dir"),
        (lambda f: ["run", str(FIXTURES / "no_compile.py"), "--backends", "eager,aot_eager", "--out-dir", str(f)],
         "--out-dir"),
        (lambda f: ["bisect", str(FIXTURES / "no_compile.py"), "--backend", "aot_eager", "--out-dir", f"{f}/x"],
         "--out-dir"),
        (lambda f: ["record", str(FIXTURES / "no_compile.py"), "-o", f"{f}/x.jsonl"], "-o"),
        (lambda f: ["repro", "no-such-run", "--out-dir", f"{f}/x"], "--out-dir"),
        # /proc takes no new files, whoever asks: the check must try, not just look for the directory
        (lambda f: ["run", str(FIXTURES / "no_compile.py"), "--backends", "eager,aot_eager", "--out-dir",
                    str(f.parent), "--html", "/proc/tracediff-report.html"], "--html"),
        (lambda f: ["run", str(FIXTURES / "no_compile.py"), "--backends", "eager,aot_eager", "--out-dir",
                    str(f.parent), "--junit", "/proc/tracediff-junit.xml"], "--junit"),
    ],
    ids=["run-out-dir-under-file", "run-out-dir-is-file", "bisect-out-dir", "record-o", "repro-out-dir", "html",
         "junit"],
)
def test_unwritable_output_is_one_line_and_exit_2_before_any_run(make_args, option: str, regular_file: Path) -> None:
    result = invoke(*make_args(regular_file))
    line = _one_line_error(result, option)
    assert "recording" not in result.stderr and "Traceback" not in line


# -- Ctrl-C: exit 130, the partial traces named, no process left ---------------------------------


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.fresh_children  # how the launcher stops and reports its own child
def test_ctrl_c_exits_130_names_the_partial_trace_and_leaves_no_process(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    tracediff = subprocess.Popen(
        [sys.executable, "-m", "tracediff.cli", "run", str(FIXTURES / "trains_until_stopped.py"),
         "--backends", "eager,aot_eager", "--out-dir", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=ctrl_c_as_from_a_terminal,
    )
    try:
        assert tracediff.stderr is not None
        child = None
        for line in tracediff.stderr:  # blocks until the script says it is training (or tracediff ends)
            if "training, pid" in line:
                child = int(line.rsplit(" ", 1)[1])
                break
        assert child is not None and _alive(child)
        tracediff.send_signal(signal.SIGINT)
        _, rest = tracediff.communicate(timeout=120)
    finally:
        if tracediff.poll() is None:
            tracediff.kill()
    assert tracediff.returncode == 130, rest
    last = rest.strip().splitlines()[-1]
    trace = out / "a-eager.jsonl"
    assert last.startswith("tracediff: interrupted") and str(out) in last and str(trace) in last, rest
    assert "Aborted" not in rest and "Traceback" not in rest
    assert not _alive(child)
    shown = invoke("show", str(trace))  # the partial trace is readable: the script stopped, its footer says why
    assert shown.exit_code == 0 and "KeyboardInterrupt" in shown.stdout


# -- a failed script says how it failed ---------------------------------------------------------


@pytest.mark.fresh_children  # how the launcher stops and reports its own child
def test_script_exiting_with_status_2_says_so_with_its_last_lines(tmp_path: Path) -> None:
    result = invoke("run", str(FIXTURES / "train_with_args.py"), "--backends", "eager,aot_eager",
                    "--out-dir", str(tmp_path), "--", "--epochs", "1")
    assert result.exit_code == 3
    report = json.loads((tmp_path / "report.json").read_text())
    for run in report["runs"]:
        assert "the script exited with status 2" in run["failure"] and "raised" not in run["failure"]
        assert any("unrecognized arguments: --epochs 1" in line for line in run["output_tail"])
    text = result.stdout
    assert "run A failed: under backend eager, the script exited with status 2" in text
    assert "| train_with_args.py: error: unrecognized arguments: --epochs 1" in text  # its own last lines


def test_text_report_of_a_raising_script_names_the_exception(run_fixture) -> None:
    report = run_fixture("raises_when_compiled.py", "eager,aot_eager").report
    error = report["runs"][1]["error"]
    assert error and error["type"]
    assert f"the script raised {error['type']}: {error['message']}" in render_text(report)


@pytest.mark.fresh_children  # how the launcher stops and reports its own child
def test_script_killed_by_a_signal_names_the_signal(tmp_path: Path) -> None:
    result = invoke("run", str(FIXTURES / "crashes_in_native_code.py"), "--backends", "eager,aot_eager",
                    "--out-dir", str(tmp_path))
    assert result.exit_code == 3
    assert "killed by signal SIGSEGV (11)" in result.stdout
    assert "| sum before the crash" in result.stdout and "Traceback" not in result.stderr


# -- options go before --, the script's arguments after it --------------------------------------


@pytest.mark.parametrize("command", ["run", "record", "bisect"])
def test_unknown_option_after_the_script_stops_and_says_where_it_goes(command: str, tmp_path: Path) -> None:
    result = invoke(command, str(FIXTURES / "train_with_args.py"), "--out", str(tmp_path / "x"))
    line = _one_line_error(result, "--out is not an option", "after --")
    assert "recording" not in result.stderr and f"tracediff {command}" in line


def test_stray_argument_after_the_script_stops() -> None:
    _one_line_error(invoke("run", str(FIXTURES / "train_with_args.py"), "data.txt"), "'data.txt'", "after --")


def test_tracediff_options_after_the_script_and_script_arguments_after_dashdash(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    result = invoke("record", str(FIXTURES / "train_with_args.py"), "-o", str(trace), "--backend", "aot_eager",
                    "--", "--steps", "1")
    assert result.exit_code == 0, result.stderr
    assert "[aot_eager] step 0" in result.stderr and "step 1" not in result.stderr  # --steps 1 reached the script
    header = json.loads(trace.read_text().splitlines()[0])
    assert header["backend"] == "aot_eager" and header["command"][1:] == ["--steps", "1"]


def test_help_says_where_script_arguments_go() -> None:
    for command in ("run", "record", "bisect"):
        text = invoke(command, "--help").stdout
        assert "[-- SCRIPT_ARGS...]" in text and "after it" in text.replace("\n", " ")
    assert "130 interrupted" in invoke("--help").stdout


# -- backends refused before anything runs -------------------------------------------------------


def test_bisect_refuses_a_custom_backend_at_once() -> None:
    result = invoke("bisect", str(FIXTURES / "wrong_decomposition.py"), "--backend", WRONG)
    _one_line_error(result, "custom backend", "CompilerBisector", "--backend inductor")


def test_custom_backend_without_that_attribute_is_one_line_before_any_run() -> None:
    result = invoke("run", str(FIXTURES / "no_compile.py"), "--backends", "eager,wrong_decomposition:wrong_cos")
    _one_line_error(result, "wrong_decomposition.py defines no 'wrong_cos'")


def test_backend_source_check_refuses_only_a_plain_no(tmp_path: Path) -> None:
    module = tmp_path / "mod.py"
    module.write_text("import torch\nfrom x import y as z\nif torch:\n    def a(): pass\nelse:\n    b = 1\n"
                      "try:\n    import c.d\nexcept ImportError:\n    e = None\nclass F:\n    g = 1\n")
    for name in ("torch", "z", "a", "b", "c", "e", "F"):
        assert defines(module, name), name
    for name in ("y", "g", "missing"):
        assert not defines(module, name), name
    module.write_text("from x import *\n")
    assert defines(module, "anything")  # cannot be told without running it: the import decides
    module.write_text("def __getattr__(name):\n    return name\n")
    assert defines(module, "anything")
    module.write_text("globals()['made'] = 1\n")
    assert defines(module, "made")


# -- repro: the command it prints can be pasted --------------------------------------------------


def test_repro_command_line_survives_spaces(tmp_path: Path) -> None:
    script = str(tmp_path / "my runs" / "repro.py")
    result = {"script": script, "inputs": "inputs.pt", "backend": "inductor", "local_modules": [], "notes": [],
              "verdict": "written", "ops": [{"index": 6, "op": "aten::cos", "source": "m.py:3"}]}
    line = next(line for line in render_result(result).splitlines() if line.strip().startswith("python "))
    assert shlex.split(line) == ["python", script]


# -- no noise about the environment (make demo's venv has no numpy) ------------------------------


def test_no_numpy_warning_where_numpy_is_not_installed(tmp_path: Path) -> None:
    hidden = tmp_path / "hide-numpy" / "numpy"
    hidden.mkdir(parents=True)  # `import numpy` fails here as it does where numpy is not installed
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError('No module named numpy', name='numpy')\n")
    env = dict(os.environ, PYTHONPATH=f"{hidden.parent}{os.pathsep}{ROOT}")
    done = subprocess.run([sys.executable, "-m", "tracediff.cli", "record", str(FIXTURES / "no_compile.py"),
                           "--backend", "aot_eager", "-o", str(tmp_path / "t.jsonl")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "NumPy" not in done.stderr and "Warning" not in done.stderr, done.stderr
