"""NaN/Inf origin: the first op or kernel making NaN/Inf from finite inputs, `tracediff nan`."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.conftest import invoke, marker_line
from tests.synth import TraceBuilder
from tracediff.diff.nan import scan

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
