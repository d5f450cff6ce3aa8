"""A record paired by op with the first op of a chain the other run computed in one record moves to the chain's
end (align.py's `_to_chain_ends`): a kernel fusing GELU's `0.5 * x * (1 + tanh(...))` writes the last `mul`'s
value. Left at the first `mul`, the pair compared `0.5 * x` with GELU's output: a false alarm on a healthy
bf16 training run of Hugging Face GPT-2, eager against inductor."""

from __future__ import annotations

from array import array
from pathlib import Path

from tracediff.config import Config
from tracediff.diff import align as aligner
from tracediff.diff.align import OP_TIER
from tracediff.diff.engine import aligned_skeletons, diff_traces
from tracediff.diff.skeleton import Skeleton, alignable
from tracediff.trace.reader import Trace

# The first 4 steps of `fixtures/gpt2_bf16_train.py` on CPU, recorded with `tracediff record --backend eager`
# and `--backend inductor` (each cut after its 4th step, the footer kept; sketches and paths left out to
# keep the files small). The old alignment paired step 3's GELU kernel with the chain's first `mul`.
_RECORDED = Path(__file__).parent / "data" / "gpt2_bf16_4_steps"
_LINES = {"mm": 1, "view": 2, "gelu": 66, "other": 9}
_OPS = {"addmm": 1, "view": 2, "mul": 3, "pow": 4, "add": 5, "tanh": 6}


def _skeleton(records: list[tuple[str, str]]) -> Skeleton:
    """(op, line) per alignable record: the op keys `primary`, the line `source` (0: not known)."""
    skeleton = Skeleton(Path("x.jsonl"), {"t": "header"})
    skeleton.primary = array("q", (_OPS[op] for op, _ in records))
    skeleton.source = array("q", (_LINES.get(line, 0) for _, line in records))
    skeleton.length = len(records)
    return skeleton


_GELU = [("mul", "gelu"), ("pow", "gelu"), ("mul", "gelu"), ("add", "gelu"), ("mul", "gelu"), ("tanh", "gelu"),
         ("add", "gelu"), ("mul", "gelu")]


def _moved(a: Skeleton, b: Skeleton, pairs: dict[int, int]) -> dict[int, int]:
    partner = array("q", [-1]) * len(a)
    tier = bytearray(len(a))
    for i, j in pairs.items():
        partner[i], tier[i] = j, OP_TIER
    aligner._to_chain_ends(partner, tier, a, b)
    assert all((tier[i] == OP_TIER) == (partner[i] >= 0) for i in range(len(a)))
    return {i: j for i, j in enumerate(partner) if j >= 0}


def test_a_kernel_paired_with_its_chains_first_op_moves_to_the_last_op_with_that_key() -> None:
    a = _skeleton([("addmm", "mm"), ("view", "view"), *_GELU, ("view", "mm"), ("addmm", "mm")])
    b = _skeleton([("addmm", "mm"), ("mul", "gelu"), ("addmm", "mm")])  # the kernel is keyed as its last op
    assert _moved(a, b, {0: 0, 2: 1, 11: 2}) == {0: 0, 9: 1, 11: 2}


def test_the_same_on_the_other_side_a_decomposed_chain_in_b() -> None:
    a = _skeleton([("addmm", "mm"), ("mul", "gelu"), ("addmm", "mm")])
    b = _skeleton([("addmm", "mm"), *_GELU, ("addmm", "mm")])
    assert _moved(a, b, {0: 0, 1: 1, 2: 9}) == {0: 0, 1: 8, 2: 9}


def test_the_chain_ends_at_another_line_at_a_paired_record_and_nowhere_without_a_line() -> None:
    other_line = _skeleton([("mul", "gelu"), ("pow", "gelu"), ("mul", "other"), ("mul", "gelu")])
    paired_after = _skeleton([("mul", "gelu"), ("pow", "gelu"), ("mul", "gelu"), ("add", "gelu"), ("mul", "gelu")])
    no_line = _skeleton([("mul", "?"), ("mul", "?"), ("mul", "?")])
    one, two = _skeleton([("mul", "gelu")]), _skeleton([("mul", "gelu"), ("mul", "gelu")])
    assert _moved(other_line, one, {0: 0}) == {0: 0}
    assert _moved(paired_after, two, {0: 0, 3: 1}) == {2: 0, 3: 1}
    assert _moved(no_line, one, {0: 0}) == {0: 0}


def test_recorded_gelu_kernels_pair_with_the_mul_ending_their_chain_and_the_run_matches() -> None:
    eager, inductor = _RECORDED / "eager.jsonl.zst", _RECORDED / "inductor.jsonl.zst"
    a, b, partner, _ = aligned_skeletons(eager, inductor)
    records_a = [r for r in Trace(eager) if alignable(r)]
    records_b = [r for r in Trace(inductor) if alignable(r)]
    gelu_pairs = 0
    for i, j in enumerate(partner):
        if j >= 0 and records_b[j].get("name") == "cpp_fused_add_mul_pow_tanh_view_3":  # GELU's forward
            gelu_pairs += 1
            assert records_a[i]["op"] == "aten::mul.Tensor" and records_a[i]["src"] == "activations.py:66"
            assert records_a[i + 1]["src"] != "activations.py:66"  # the chain's last op
    assert gelu_pairs >= 4
    result = diff_traces(eager, inductor, Config())
    assert result.first is None, result.first
