"""Values judged at the precision they carry: a widening cast is never blamed (diff/precision.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.synth import TraceBuilder
from tracediff.config import Config
from tracediff.diff.decide import decide
from tracediff.diff.engine import diff_traces
from tracediff.diff.precision import preserves_values, widens

X = torch.linspace(-2, 2, 64 * 32).reshape(64, 32)


def _report(a: Path, b: Path) -> dict:
    config = Config()
    return decide(diff_traces(a, b, config), [str(a), str(b)], config).to_json()


def _gelu_bf16(rounding_noise: float = 0.0) -> torch.Tensor:
    """GELU in bfloat16; `rounding_noise` moves values by about a bf16 ulp, as another fused kernel may."""
    g = torch.nn.functional.gelu(X.bfloat16().float())
    return (g * (1 + rounding_noise * torch.sign(torch.sin(X * 7)))).bfloat16()


def _widened(builder: TraceBuilder, g: torch.Tensor, fault: bool = False) -> None:
    """bf16 input -> gelu (bf16) -> .float() -> cos -> sum, all recorded op by op."""
    t = builder.tensor
    xb = X.bfloat16()
    builder.op("aten::gelu", [t("xb", xb)], [t("g", g, "0")], src="m.py:5")
    f = g.float()
    builder.op("aten::_to_copy", [t("g", g)], [t("f", f, "0")], src="m.py:6")
    c = torch.sin(f) if fault else torch.cos(f)
    builder.op("aten::cos", [t("f", f)], [t("c", c, "0")], src="m.py:7")
    builder.op("aten::sum", [t("c", c)], [t("s", c.sum(), "0")], src="m.py:8")


def test_widening_cast_of_bf16_differences_is_no_divergence(tmp_path: Path) -> None:
    """The autocast case: bf16 values differ by bf16 rounding; `.float()` of them must not be blamed."""
    a, b = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl", "inductor")
    _widened(a, _gelu_bf16()), _widened(b, _gelu_bf16(4e-3))
    report = _report(a.close(), b.close())
    assert report["verdict"] == "match", report["first_divergence"]
    assert report["compared"] == 4


def test_real_fault_after_a_widening_cast_is_still_found(tmp_path: Path) -> None:
    a, b = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl", "inductor")
    _widened(a, _gelu_bf16()), _widened(b, _gelu_bf16(4e-3), fault=True)
    first = _report(a.close(), b.close())["first_divergence"]
    assert first["rule"] == "inputs_agree_outputs_differ"
    assert (first["op"], first["source"], first["inputs_agree"]) == ("aten::cos", "m.py:7", True)
    assert first["tensor"]["tolerance"]["rtol"] == Config().tolerances["bfloat16"].rtol  # judged at bf16's precision


def _fused(builder: TraceBuilder, out: torch.Tensor) -> None:
    """B as inductor runs it: one kernel computes GELU and writes float32 directly (no bf16 rounding)."""
    t = builder.tensor
    builder.writer.write({"t": "kernel", "i": builder.seq, "name": "cpp_fused__to_copy_gelu_0", "src": "m.py:5",
                          "m": "Net", "fuses": [{"op": "aten::gelu", "src": "m.py:5"},
                                                {"op": "aten::_to_copy", "src": "m.py:6"}],
                          "in": [t("xb", X.bfloat16(), "in_ptr0")], "out": [t("f", out, "out_ptr0")]})
    builder.seq += 1
    c = torch.cos(out)
    builder.op("aten::cos", [t("f", out)], [t("c", c, "0")], src="m.py:7")
    builder.op("aten::sum", [t("c", c)], [t("s", c.sum(), "0")], src="m.py:8")


def test_fused_kernel_writing_float32_unrounded_is_no_divergence(tmp_path: Path) -> None:
    a, b = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl", "inductor")
    _widened(a, _gelu_bf16())
    _fused(b, torch.nn.functional.gelu(X.bfloat16().float()))
    report = _report(a.close(), b.close())
    assert report["verdict"] == "match", report["first_divergence"]


def test_a_widening_cast_is_not_reported_while_the_op_before_it_is_a_candidate(tmp_path: Path) -> None:
    a, b = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl", "inductor")
    _widened(a, _gelu_bf16())
    _fused(b, torch.nn.functional.gelu(X.bfloat16().float()) * 1.2)  # a wrong kernel
    first = _report(a.close(), b.close())["first_divergence"]
    assert first["rule"] == "walked_back"
    assert [c["op"] for c in first["candidates"]] == ["aten::gelu", "aten::_to_copy"]
    assert first["op"] == "aten::gelu" and first["source"] == "m.py:5"
    assert "only moves or widens" in first["note"]


@pytest.mark.parametrize("src, dst, exact", [("bfloat16", "float32", True), ("float16", "float32", True),
                                             ("float32", "float32", True), ("float32", "float64", True),
                                             ("float32", "bfloat16", False), ("bfloat16", "float16", True),
                                             ("float16", "bfloat16", False), ("int64", "float32", False)])
def test_widens(src: str, dst: str, exact: bool) -> None:
    assert widens(src, dst) is exact


def test_preserves_values() -> None:
    def rec(op: str, src: str, dst: str) -> dict:
        return {"t": "op", "op": op, "in": [{"dt": src}], "out": [{"dt": dst}]}

    assert preserves_values(rec("aten::_to_copy", "bfloat16", "float32"))
    assert not preserves_values(rec("aten::_to_copy", "float32", "bfloat16"))
    assert preserves_values(rec("aten::view", "float32", "float32"))
    assert preserves_values(rec("aten::clone", "bfloat16", "bfloat16"))
    assert not preserves_values(rec("aten::gelu", "float32", "float32"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_fixture_matches_under_aot_eager(run_fixture, dtype: str) -> None:
    result = run_fixture("autocast_bf16_mlp.py", "eager,aot_eager", "--", "--dtype", dtype)
    assert result.exit_code == 0 and result.report["verdict"] == "match", result.report["first_divergence"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_fixture_matches_under_inductor_by_default(run_fixture, dtype: str) -> None:
    """Inductor fuses GELU with the final .float() and skips the bf16/fp16 rounding eager does:
    a difference at the autocast dtype's precision, not float32's."""
    result = run_fixture("autocast_bf16_mlp.py", "eager,inductor", "--", "--dtype", dtype)
    assert result.exit_code == 0 and result.report["verdict"] == "match", result.report["first_divergence"]
    assert result.report["compared"] > 20
