"""Values one line computes in another order in B (DDP's gradient buckets after a compiled backward):
monotone pairs cannot follow them, and pairing them by position compared one gradient with another."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracediff.config import load_config
from tracediff.diff.engine import diff_traces


def _t(id_: int, v: int, value: float) -> dict[str, Any]:
    fp = {"sum": value * 4, "l1": abs(value) * 4, "l2": abs(value) * 2, "max": abs(value), "nan": 0, "inf": 0, "n": 4}
    return {"a": "self", "id": id_, "v": v, "dt": "float32", "sh": [4], "dev": "cpu", "fp": fp}


N = 24  # gradients: more than the aligner's crossing trials (a bucket holds many)


def _write(path: Path, copy_order: list[int], backend: str) -> None:
    records: list[dict[str, Any]] = [{"op": "aten::ones", "in": [], "out": [_t(0, 0, 1.0)], "src": "p.py:1"}]
    for k in range(N):  # gradients 2, 3, 4, ...
        records.append({"op": "aten::mul.Tensor", "in": [_t(0, 0, 1.0)], "out": [_t(1 + k, 0, 2.0 + k)],
                        "src": f"q.py:{2 + k}"})
    for k in copy_order:  # copied into .grad, in the order the gradients' buckets hold them
        records.append({"op": "aten::copy_", "in": [dict(_t(100 + k, 0, 0.0), a="self"),
                                                     dict(_t(1 + k, 0, 2.0 + k), a="src")],
                        "out": [_t(100 + k, 1, 2.0 + k)], "src": "p.py:9"})
    for k in range(N):  # the optimizer reads each .grad
        records.append({"op": "aten::add.Tensor", "in": [_t(100 + k, 1, 2.0 + k)], "out": [_t(200 + k, 0, 3.0 + k)],
                        "src": "p.py:10"})
    header = {"t": "header", "schema": 2, "backend": backend, "command": ["p.py"]}
    lines = [header, *({"t": "op", "d": 0, "m": None, **r, "i": i} for i, r in enumerate(records)),
             {"t": "footer", "complete": True, "records": len(records), "ops": len(records), "compile_calls": 1}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_values_copied_in_another_order_are_not_compared_with_each_other(tmp_path: Path) -> None:
    _write(tmp_path / "a.jsonl", list(range(N)), "eager")
    _write(tmp_path / "b.jsonl", list(reversed(range(N))), "aot_eager")
    result = diff_traces(tmp_path / "a.jsonl", tmp_path / "b.jsonl", load_config(None))
    assert result.first is None
    assert result.paired >= 2 * N  # the ops before and the optimizer's reads still pair


def test_a_value_that_differs_is_still_found_among_reordered_ones(tmp_path: Path) -> None:
    _write(tmp_path / "a.jsonl", list(range(N)), "eager")
    _write(tmp_path / "b.jsonl", list(reversed(range(N))), "aot_eager")
    text = (tmp_path / "b.jsonl").read_text().replace('"sum": 12.0, "l1": 12.0, "l2": 6.0, "max": 3.0',
                                                        '"sum": 12.4, "l1": 12.4, "l2": 6.2, "max": 3.1')
    (tmp_path / "b.jsonl").write_text(text)  # B's second gradient (3) came out 3.1
    result = diff_traces(tmp_path / "a.jsonl", tmp_path / "b.jsonl", load_config(None))
    assert result.first is not None and result.first.a.source == "q.py:3"
