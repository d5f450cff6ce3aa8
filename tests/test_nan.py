"""NaN/Inf origin: the first op or kernel making NaN/Inf from finite inputs, `tracediff nan`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import FIXTURES, invoke, marker_line
from tests.synth import TraceBuilder
from tracediff.diff.nan_origin import scan

X = torch.linspace(0.0, 2.0, 8)


def _nan_trace(path: Path) -> Path:
    """exp (finite) -> log(x - 1) makes NaN -> relu carries it."""
    b = TraceBuilder(path)
    t = b.tensor
    e = torch.exp(X)
    b.op("aten::exp", [t("x", X)], [t("e", e, "0")], src="m.py:3")
    y = torch.log(X - 1)
    b.op("aten::log", [t("x", X)], [t("y", y, "0")], src="m.py:4", module="Net.head")
    b.op("aten::relu", [t("y", y)], [t("r", torch.relu(y), "0")], src="m.py:5")
    return b.close()


def test_origin_is_the_op_making_nan_from_finite_inputs(tmp_path: Path) -> None:
    found = scan(_nan_trace(tmp_path / "a.jsonl"))
    assert found.origin is not None and found.entered is None
    assert (found.origin.op, found.origin.source, found.origin.place.module) == ("aten::log", "m.py:4", "Net.head")
    assert found.origin.outputs[0]["nan"] == int(torch.isnan(torch.log(X - 1)).sum())


def test_masked_fill_with_inf_is_no_origin_and_not_outside(tmp_path: Path) -> None:
    b = TraceBuilder(tmp_path / "a.jsonl")
    t = b.tensor
    masked = X.masked_fill(X > 1, float("-inf"))
    b.op("aten::masked_fill.Scalar", [t("x", X)], [t("m", masked, "0")], src="m.py:3", nfs=True)
    b.op("aten::softmax.int", [t("m", masked)], [t("s", torch.softmax(masked, 0), "0")], src="m.py:4")
    found = scan(b.close())
    assert found.origin is None and found.entered is None and not found.found


def test_nan_from_outside_the_recording(tmp_path: Path) -> None:
    b = TraceBuilder(tmp_path / "a.jsonl")
    t = b.tensor
    bad = X.clone()
    bad[2] = float("nan")
    b.op("aten::mul.Tensor", [t("bad", bad)], [t("y", bad * 2, "0")], src="m.py:9")
    found = scan(b.close())
    assert found.origin is None and found.entered is not None and found.entered.source == "m.py:9"
    result = invoke("nan", str(tmp_path / "a.jsonl"))
    assert result.exit_code == 1 and "outside the recording" in result.stdout


def test_kernel_origin_lists_its_fused_ops(tmp_path: Path) -> None:
    b = TraceBuilder(tmp_path / "b.jsonl", backend="inductor")
    t = b.tensor
    y = torch.log(X - 1)
    b.writer.write({"t": "kernel", "i": 0, "name": "cpp_fused_log_sub_0", "site": "k:1", "d": 0, "m": None,
                    "src": "m.py:4", "code": "", "in": [t("x", X, "in_ptr0")], "out": [t("y", y, "out_ptr0")],
                    "fuses": [{"op": "aten::sub.Tensor", "src": "m.py:4", "m": None},
                              {"op": "aten::log", "src": "m.py:4", "m": None}]})
    b.seq += 1
    path = b.close()
    found = scan(path)
    assert found.origin is not None and [f["op"] for f in found.origin.fuses] == ["aten::sub.Tensor", "aten::log"]
    both = invoke("nan", str(_nan_trace(tmp_path / "a.jsonl")), str(path), "--format", "json")
    report = json.loads(both.stdout)
    assert both.exit_code == 1 and report["same_source"] is True
    assert report["nan_origin"]["b"]["fuses"][1]["op"] == "aten::log"


def test_clean_trace_exits_0_and_says_so(tmp_path: Path) -> None:
    b = TraceBuilder(tmp_path / "a.jsonl")
    b.op("aten::exp", [b.tensor("x", X)], [b.tensor("e", torch.exp(X), "0")])
    result = invoke("nan", str(b.close()))
    assert result.exit_code == 0 and "no NaN or Inf" in result.stdout


def test_nan_producer_fixture_end_to_end(run_fixture) -> None:
    """Runs agree (match), yet both reports and `tracediff nan` name the log line."""
    result = run_fixture("nan_producer.py", "eager,aot_eager")
    report = result.report
    line = marker_line("nan_producer.py", "nan line")
    assert report["verdict"] == "match"
    for side in "ab":
        assert report["nan_origin"][side]["source"] == f"nan_producer.py:{line}"
        assert report["nan_origin"][side]["outputs"][0]["nan"] > 0
    shown = invoke("nan", *report["traces"])
    assert shown.exit_code == 1
    assert f"first NaN/Inf made from finite inputs: aten::log at nan_producer.py:{line}" in shown.stdout
    assert "same source line" in shown.stdout


def _initialized_parameter(b: TraceBuilder, init: str, garbage: torch.Tensor, value: torch.Tensor,
                           src: torch.Tensor | None = None) -> None:
    """`nn.Parameter(torch.empty(...))` (a new tensor over the garbage), then an op overwriting it whole."""
    t = b.tensor
    b.op("aten::empty.memory_format", [], [t("empty", garbage, "0", uninit=True)], src="m.py:1")
    inputs = [t("param", garbage)] + ([t("src", src, "src")] if src is not None else [])
    b.op(init, inputs, [t("param", value, "0")], src="m.py:2")
    b.op("aten::mul.Tensor", [t("param", value)], [t("y", value * 2, "0")], src="m.py:3")


def test_an_initializer_does_not_read_the_garbage_it_overwrites(tmp_path: Path) -> None:
    garbage = torch.tensor([float("nan"), 1e30, float("inf"), 0.0])
    for init in ("aten::normal_", "aten::fill_.Scalar", "aten::zero_", "aten::uniform_", "aten::copy_"):
        b = TraceBuilder(tmp_path / f"{init}.jsonl")
        src = torch.ones(4) if init == "aten::copy_" else None
        _initialized_parameter(b, init, garbage, torch.ones(4), src)
        found = scan(b.close())
        assert not found.found, (init, found.as_dict())


def test_copy_of_nan_from_outside_still_counts_as_entered(tmp_path: Path) -> None:
    b = TraceBuilder(tmp_path / "a.jsonl")
    nan_src = torch.tensor([float("nan"), 1.0, 2.0, 3.0])
    _initialized_parameter(b, "aten::copy_", torch.zeros(4), nan_src, nan_src)
    found = scan(b.close())
    assert found.entered is not None and found.entered.op == "aten::copy_"


def test_truncated_trace_is_said_so(tmp_path: Path) -> None:
    path = _nan_trace(tmp_path / "a.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # the footer: the writer was killed before writing it
    clean = TraceBuilder(tmp_path / "clean.jsonl")
    clean.op("aten::exp", [clean.tensor("x", X)], [clean.tensor("e", torch.exp(X), "0")])
    clean_path = clean.close()
    clean_path.write_text("".join(clean_path.read_text().splitlines(keepends=True)[:-1]))
    for trace in (path, clean_path):
        result = invoke("nan", str(trace))
        assert "the trace is truncated" in result.stdout and "may be incomplete" in result.stdout
        report = json.loads(invoke("nan", str(trace), "--format", "json").stdout)
        assert report["truncated"] == {"a": True}


def test_overwritten_empty_fixture_has_no_nan_origin(run_fixture) -> None:
    """torch.empty holding Inf, overwritten by nn.init / copy_: no NaN origin in the run report nor `tracediff nan`."""
    report = run_fixture("overwritten_empty.py", "eager,aot_eager").report
    assert report["verdict"] == "match"
    assert report["nan_origin"] == {"a": None, "b": None}
    trace = report["traces"][0]
    garbage = [r for r in map(json.loads, Path(trace).read_text().splitlines())
               if r.get("op", "").startswith("aten::empty") and (r["out"][0]["fp"]["inf"] or r["out"][0]["fp"]["nan"])]
    assert garbage, "the fixture's torch.empty should hold Inf garbage (precondition of this test)"
    shown = invoke("nan", *report["traces"])
    assert shown.exit_code == 0, shown.stdout
    assert "outside the recording" not in shown.stdout


def test_hf_gpt2_trace_has_no_nan(tmp_path: Path) -> None:
    """Hugging Face GPT-2's init: LayerNorm/Embedding weights are torch.empty overwritten by fill_/normal_."""
    pytest.importorskip("transformers")
    trace = tmp_path / "gpt2.jsonl"
    recorded = invoke("record", str(FIXTURES / "hf_gpt2_tiny.py"), "--backend", "eager", "-o", str(trace))
    assert recorded.exit_code == 0, recorded.stderr
    shown = invoke("nan", str(trace))
    assert shown.exit_code == 0 and "no NaN or Inf" in shown.stdout, shown.stdout


def test_attention_logsumexp_padded_with_inf_is_no_origin(tmp_path: Path) -> None:
    """CUDA's memory-efficient SDPA pads its logsumexp output with Inf (HF BERT training on an H100)."""
    b = TraceBuilder(tmp_path / "a.jsonl")
    t = b.tensor
    q = torch.linspace(-1, 1, 2 * 4 * 16 * 8).reshape(2, 4, 16, 8)
    lse = torch.full((2, 4, 32), float("inf"))
    lse[..., :16] = 1.0
    b.op("aten::_scaled_dot_product_efficient_attention", [t("q", q, "query")],
         [t("o", q, "0"), t("lse", lse, "1")], src="sdpa_attention.py:158")
    b.op("aten::_scaled_dot_product_efficient_attention_backward", [t("o", q, "out"), t("lse", lse, "logsumexp")],
         [t("gq", q * 0.5, "0")])
    found = scan(b.close())
    assert found.origin is None and found.entered is None and not found.found


# -- intended infinities: a mask's -inf written from a constant is no NaN/Inf origin ---------------------

CAUSAL = torch.full((4, 4), float("-inf")).triu(1)


def _mask_kernel(b: TraceBuilder, nfs: bool) -> None:
    """A generated kernel that builds a causal mask from no input: iota/ge/full(-inf)/where."""
    full = {"op": "aten::full", "src": "m.py:3", "m": None, **({"nfs": True} if nfs else {})}
    b.writer.write({"t": "kernel", "i": b.seq, "name": "triton_poi_fused_full_triu_0", "site": "k:1", "d": 0,
                    "m": None, "src": "m.py:3", "code": "", "in": [], "out": [b.tensor("mask", CAUSAL, "out_ptr0")],
                    "fuses": [{"op": "prims::iota", "src": "m.py:3", "m": None},
                              {"op": "aten::ge.Scalar", "src": "m.py:3", "m": None}, full,
                              {"op": "aten::where.self", "src": "m.py:3", "m": None}]})
    b.seq += 1


def test_kernel_writing_a_nonfinite_constant_is_no_origin(tmp_path: Path) -> None:
    """Inductor's causal-mask kernel (`full(-inf)` fused with `where`) writes -inf from no non-finite input."""
    for nfs in (True, False):
        b = TraceBuilder(tmp_path / f"{nfs}.jsonl", backend="inductor")
        _mask_kernel(b, nfs)
        scores = torch.linspace(-1, 1, 16).reshape(4, 4)
        b.op("aten::add.Tensor", [b.tensor("scores", scores), b.tensor("mask", CAUSAL, "other")],
             [b.tensor("masked", scores + CAUSAL, "0")], src="m.py:4")
        found = scan(b.close())
        if nfs:  # the mask is on purpose; its later reads are of a value a recorded kernel made
            assert not found.found, found.as_dict()
        else:  # without the marker the same kernel is a genuine origin (e.g. exp overflowing)
            assert found.origin is not None and found.origin.op == "triton_poi_fused_full_triu_0"


def test_scalar_tensor_from_a_python_number_is_a_constant(tmp_path: Path) -> None:
    """`torch.tensor(float("-inf"))` is lifted by `lift_fresh`: a constant of the script, not NaN/Inf from
    outside; a tensor of data with NaN built the same way still counts as entered."""
    b = TraceBuilder(tmp_path / "a.jsonl")
    neg = torch.tensor(float("-inf"))
    b.op("aten::lift_fresh", [b.tensor("neg", neg)], [b.tensor("neg", neg, "0")], src="m.py:2")
    b.op("aten::maximum", [b.tensor("x", X), b.tensor("neg", neg, "other")], [b.tensor("y", X, "0")], src="m.py:3")
    assert not scan(b.close()).found
    b = TraceBuilder(tmp_path / "b.jsonl")
    data = torch.tensor([1.0, float("nan"), 2.0])
    b.op("aten::lift_fresh", [b.tensor("data", data)], [b.tensor("data", data, "0")], src="m.py:2")
    found = scan(b.close())
    assert found.origin is None and found.entered is not None and found.entered.op == "aten::lift_fresh"


@pytest.mark.slow
def test_causal_masks_under_inductor_are_no_nan_origin_and_a_later_overflow_is(run_fixture) -> None:
    """A generated kernel writes the masks' -inf from no non-finite input: on purpose, no origin.
    The exp overflowing after them is the origin in both runs (one compiled run checks both: a mask
    taken for an origin would be reported first)."""
    report = run_fixture("causal_mask_inf.py", "eager,inductor", "--", "--overflow").report
    assert report["verdict"] == "match"
    b = [json.loads(line) for line in Path(report["traces"][1]).read_text().splitlines()]
    mask = marker_line("causal_mask_inf.py", "mask line")
    written_inf = [r for r in b if r["t"] == "kernel" and any((t.get("fp") or {}).get("inf") for t in r["out"])
                   and any(f.get("src") == f"causal_mask_inf.py:{mask}" for f in r.get("fuses") or ())]
    assert written_inf, "a generated kernel should write the -inf mask (precondition of this test)"
    line = marker_line("causal_mask_inf.py", "overflow line")
    assert report["nan_origin"]["a"]["op"] == "aten::exp"
    for side in "ab":
        assert report["nan_origin"][side]["source"] == f"causal_mask_inf.py:{line}"
        assert report["nan_origin"][side]["outputs"][0]["inf"] > 0
