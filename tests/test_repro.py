"""tracediff repro: a standalone script for the first divergence.

The end-to-end tests move the written repro away from the fixtures and run it
with a `tracediff` package on the path that refuses to import, so a repro that
needed tracediff (or the fixtures folder) would fail here.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import TRACES_ONLY, Result, invoke, marker_line
from tracediff.errors import UserError
from tracediff.repro.capture import ArgumentCapture, OutputRef
from tracediff.repro.script import InputName, ReproSpec, render_script, render_value

DEMO_BACKENDS = "eager,wrong_decomposition:wrong_cos_backend"


# -- pure parts -----------------------------------------------------------------------


def test_argument_values_render_as_python() -> None:
    assert render_value(InputName("x0")) == "x0"
    assert render_value(OutputRef(7, None)) == "v7"
    assert render_value(OutputRef(7, 1)) == "v7[1]"
    assert render_value([1, -2.5, True, None]) == "[1, -2.5, True, None]"
    assert render_value((3,)) == "(3,)"
    assert render_value(float("-inf")) == '-float("inf")'
    assert render_value(math.nan) == 'float("nan")'
    assert render_value(torch.float16) == "torch.float16"
    assert render_value(torch.contiguous_format) == "torch.contiguous_format"
    assert eval(render_value(torch.device("cpu")), {"torch": torch}) == torch.device("cpu")
    with pytest.raises(UserError, match="Generator"):
        render_value(torch.Generator())


def test_capture_keeps_dataflow_between_captured_ops_and_copies_the_rest() -> None:
    capture = ArgumentCapture({0, 1})
    x = torch.ones(3)
    kept = capture.keep_arguments(((x, 2.0), {}))
    assert torch.equal(kept[0][0], x) and kept[0][0] is not x  # a copy: later in-place ops can't change it
    y = torch.sin(x)
    capture.add(0, torch.ops.aten.sin.default, kept[0], {}, y)
    assert capture.keep_arguments((y,)) == (OutputRef(0, None),)
    y.add_(1)  # written after it was produced: now a value, not a reference
    assert isinstance(capture.keep_arguments((y,))[0], torch.Tensor)


def test_rendered_script_computes_the_chain(tmp_path: Path) -> None:
    ops = [{"index": 3, "op": "aten.mul.Tensor", "args": (InputName("x0"), 2.0), "kwargs": {}},
           {"index": 4, "op": "aten.add.Tensor", "args": (OutputRef(3, None), InputName("x1")), "kwargs": {"alpha": 3}}]
    spec = ReproSpec(ops=ops, input_names=["x0", "x1"], backend="eager", local_modules=[], fallback_random=False,
                     rtol=1e-4, atol=1e-6, title="aten::add at t.py:1", returns=["v4"])
    namespace: dict = {"__name__": "repro_under_test", "__file__": str(tmp_path / "repro.py")}
    exec(compile(render_script(spec), "repro.py", "exec"), namespace)
    out = namespace["program"](torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0]))
    assert out.tolist() == [5.0, 7.0]  # 2x + 3*1


# -- bad input ------------------------------------------------------------------------


def test_missing_run_directory_is_one_line(tmp_path: Path) -> None:
    result = invoke("repro", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "no such run directory" in result.stderr


def test_directory_without_report_is_one_line(tmp_path: Path) -> None:
    result = invoke("repro", str(tmp_path))
    assert result.exit_code == 2 and "no report.json" in result.stderr


def test_nothing_to_reproduce_when_runs_match(run_fixture) -> None:
    run = run_fixture("wrong_decomposition.py", "eager,aot_eager")
    assert run.exit_code == 0
    result = invoke("repro", run.report["run_dir"])
    assert result.exit_code == 0
    assert "nothing to reproduce" in result.stderr


def test_a_failed_run_has_nothing_to_reproduce(run_fixture) -> None:
    run = run_fixture("raises_when_compiled.py", "eager,aot_eager")
    assert run.exit_code == 3
    result = invoke("repro", run.report["run_dir"])
    assert result.exit_code == 3 and "a run failed" in result.stderr


# -- end to end -------------------------------------------------------------------------


def _standalone(repro_dir: Path, tmp_path: Path) -> Path:
    """The repro folder moved away, plus a `tracediff` package that refuses to be imported."""
    moved = tmp_path / "moved"
    shutil.copytree(repro_dir, moved)
    blocker = tmp_path / "blocker" / "tracediff"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('a repro must not need tracediff')\n")
    return moved


def _run_standalone(moved: Path, tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "blocker"))
    return subprocess.run([sys.executable, "repro.py", *options], cwd=moved, env=env, capture_output=True,
                          text=True, timeout=600)


def _check_repro(run: Result, tmp_path: Path, fixture: str, op: str) -> None:
    assert run.exit_code == 1, run.stderr
    made = invoke("repro", run.report["run_dir"], "--out-dir", str(tmp_path / "repro"), "--format", "json")
    assert made.exit_code == 1, made.stderr
    result = made.report
    assert result["verdict"] == "reproduced"
    assert result["check"]["control_returncode"] == 0
    script = Path(result["script"]).read_text()
    assert "import tracediff" not in script and "from tracediff" not in script
    assert f"torch.ops.{op}" in script
    assert f"{fixture}:{marker_line(fixture, 'divergent line')}" in script  # the source line, as a comment

    moved = _standalone(Path(result["repro_dir"]), tmp_path)
    compiled = _run_standalone(moved, tmp_path)
    assert compiled.returncode == 1, compiled.stdout + compiled.stderr
    assert "REPRODUCED" in compiled.stdout and "DIFFER" in compiled.stdout
    control = _run_standalone(moved, tmp_path, "--backend", "eager")
    assert control.returncode == 0, control.stdout + control.stderr
    assert "AGREE" in control.stdout


def test_repro_of_a_wrong_decomposition_runs_without_tracediff(run_fixture, tmp_path: Path) -> None:
    run = run_fixture("wrong_decomposition.py", DEMO_BACKENDS)
    _check_repro(run, tmp_path, "wrong_decomposition.py", "aten.cos.default")


def test_repro_from_two_traces_without_a_run_directory(run_fixture, tmp_path: Path) -> None:
    trace_a, trace_b = run_fixture("wrong_decomposition.py", DEMO_BACKENDS).report["traces"]
    made = invoke("repro", trace_a, trace_b, "--out-dir", str(tmp_path), "--no-check", "--format", "json")
    assert made.exit_code == 1, made.stderr
    assert made.report["verdict"] == "written" and made.report["check"] is None
    assert (tmp_path / "repro.py").is_file() and (tmp_path / "inputs.pt").is_file()


@pytest.mark.slow
def test_repro_of_an_inductor_decomposition_fault(run_fixture, tmp_path: Path) -> None:
    run = run_fixture("inductor_wrong_decomposition.py", "eager,inductor")
    _check_repro(run, tmp_path, "inductor_wrong_decomposition.py", "aten.cos.default")


@pytest.mark.slow
def test_repro_of_a_perturbed_pass_inside_a_fused_kernel(run_fixture, tmp_path: Path) -> None:
    # --no-narrow: the divergence stops at the fused kernel, so all its ops are replayed together.
    run = run_fixture("perturbed_fusion.py", "eager,inductor", "--no-narrow", TRACES_ONLY)
    assert len(run.report["first_divergence"]["candidates"]) > 1
    _check_repro(run, tmp_path, "perturbed_fusion.py", "aten.cos.default")
