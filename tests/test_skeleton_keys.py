"""Pass 1 (skeleton.py) remembers the keys that depend only on a record's op, line and output shapes, and works
out the value keys anew (`_TraceKeys`): its keys must be `keys_of`'s, record by record, on recorded traces of
ops, generated kernels and compiled regions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracediff.diff import skeleton as skeleton_module
from tracediff.diff.skeleton import alignable, build_skeleton, keys_of
from tracediff.trace.reader import Trace

# 4 bf16 steps of GPT-2, eager and inductor (tests/test_align_chain_ends.py tells how they were recorded).
_RECORDED = Path(__file__).parent / "data" / "gpt2_bf16_4_steps"


@pytest.mark.parametrize("name", ["eager.jsonl.zst", "inductor.jsonl.zst"])
def test_pass_one_keys_every_record_as_keys_of_does(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _RECORDED / name
    expected = [keys_of(r) for r in Trace(path) if alignable(r)]
    kinds = {r["t"] for r in Trace(path) if alignable(r)}
    assert {"op", "region"} <= kinds and (name.startswith("eager") or "kernel" in kinds)
    for remembered in (1 << 16, 3):  # a tiny memory is cleared again and again: still the same keys
        monkeypatch.setattr(skeleton_module._TraceKeys, "_REMEMBERED", remembered)
        skeleton = build_skeleton(path)
        assert len(skeleton) == len(expected)
        assert list(skeleton.primary) == [k.primary for k in expected]
        assert list(skeleton.signature) == [k.signature for k in expected]
        assert list(skeleton.value) == [k.value or 0 for k in expected]
        assert list(skeleton.fine_value) == [k.fine_value or 0 for k in expected]
        assert list(skeleton.named) == [k.named for k in expected]
        assert list(skeleton.coarse) == [k.coarse for k in expected]
        assert list(skeleton.coarse_shifted) == [k.coarse_shifted for k in expected]
        assert skeleton.op_lines == {k.op_line for k in expected}
