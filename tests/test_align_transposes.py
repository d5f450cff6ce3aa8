"""A square weight and its transpose have the same statistics; only the order-dependent sketch tells
them apart. An aot_eager backward transposes the weight afresh (`t(w)`, then `t` of that) where eager
transposes the forward's saved `t(w)` back: pairing eager's `t(t(w))` with aot_eager's `t(w)` compared
a matrix with its transpose (a false alarm on a clean MLP on CUDA)."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.synth import TraceBuilder
from tracediff.config import load_config
from tracediff.diff.engine import diff_traces


def _write(path: Path, backend: str, transpose_afresh: bool) -> Path:
    torch.manual_seed(0)
    w, x, g = torch.randn(32, 32), torch.randn(8, 32), torch.randn(8, 32)
    trace = TraceBuilder(path, backend)
    wt = trace.tensor("wt", w.t())
    trace.op("aten::t", [trace.tensor("w", w)], [dict(wt, a="0")], src="m.py:5")
    trace.op("aten::mm", [trace.tensor("x", x), dict(wt, a="mat2")], [trace.tensor("y", x @ w.t(), "0")], src="m.py:5")
    if transpose_afresh:  # the compiled backward: t(w) again, then t of it
        trace.op("aten::t", [trace.tensor("w", w)], [trace.tensor("wt2", w.t(), "0")], src="m.py:5")
        trace.op("aten::t", [trace.tensor("wt2", w.t())], [trace.tensor("wtt", w, "0")], src="m.py:5")
    else:  # eager autograd: t of the saved t(w)
        trace.op("aten::t", [trace.tensor("wt", w.t())], [trace.tensor("wtt", w, "0")], src="m.py:5")
    trace.op("aten::mm", [trace.tensor("g", g), trace.tensor("wtt", w, "mat2")], [trace.tensor("gx", g @ w, "0")],
             src="m.py:5")
    return trace.close()


def test_a_transpose_pairs_with_the_transpose_not_with_the_matrix(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.jsonl", "eager", transpose_afresh=False)
    b = _write(tmp_path / "b.jsonl", "aot_eager", transpose_afresh=True)
    result = diff_traces(a, b, load_config(None))
    assert result.first is None, result.first
