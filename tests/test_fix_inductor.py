"""`tracediff fix` under inductor (compiles: slow): precision casts for bf16 rounding, compile disabled on
the module of a fused op a compiler bug perturbs. A budget too small is tested on a fast backend in
tests/test_fix.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES, invoke
from tests.fix_helpers import patched_copy

pytestmark = pytest.mark.slow


def _fix(fixture: str, out: Path, *options: str) -> dict:
    result = invoke("fix", str(FIXTURES / fixture), "--backend", "inductor", "--out-dir", str(out), "--format",
                    "json", *options)
    report = result.report
    assert result.exit_code == report["exit_code"]
    return report


def _run_matches(script: Path, out: Path) -> bool:
    result = invoke("run", str(script), "--backends", "eager,inductor", "--out-dir", str(out), "--format", "json")
    return result.exit_code == 0 and result.report["verdict"] == "match"


def test_bf16_rounding_of_a_fused_chain_is_fixed_by_precision_casts(tmp_path: Path) -> None:
    report = _fix("fused_bf16_cancellation.py", tmp_path / "fix")
    assert report["exit_code"] == 0
    fix = report["fix"]
    assert fix["change"]["target"] == "emulate_precision_casts" and fix["nature"] == "rounding"
    assert fix["patch"][-1] == "torch._inductor.config.emulate_precision_casts = True"
    assert _run_matches(patched_copy("fused_bf16_cancellation.py", fix["patch"], tmp_path), tmp_path / "rerun")


def test_a_compiler_bug_in_a_fused_op_is_kept_out_of_the_compile_with_its_module(tmp_path: Path) -> None:
    report = _fix("perturbed_submodule.py", tmp_path / "fix")
    assert report["exit_code"] == 0
    verdicts = {a["change"]["kind"]: a["verdict"] for a in report["attempts"]}
    assert verdicts["fallback"] == "diverged"  # the bug is not in cos's kernel: eager's kernel alone does not help
    assert all(a["ms_per_call"] is not None for a in report["attempts"])  # each change tried is timed
    fix = report["fix"]
    assert fix["change"] == {"kind": "disable_module", "target": "Net.block", "value": None}
    assert fix["patch"][0].startswith("model.block.forward = torch.compiler.disable(model.block.forward)")
    assert fix["nature"] == "compiler" and "tracediff repro" in fix["advice"]
    assert fix["ms_per_call"] is not None and fix["slowdown"] is not None
    assert _run_matches(patched_copy("perturbed_submodule.py", fix["patch"], tmp_path, ("fault_cos_in_compiler.py",)),
                        tmp_path / "rerun")
