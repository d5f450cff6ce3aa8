"""The aligner's trials re-align only the stretch they change (align.py's `Span`), and its scans over the
pairs run on byte masks: both must give what the whole-trace computation gives."""

from __future__ import annotations

import random
from array import array
from pathlib import Path

import pytest

from tracediff.diff import align as aligner
from tracediff.diff.skeleton import Skeleton


def _skeleton(rng: random.Random, n: int, vocabulary: int) -> Skeleton:
    keys = [rng.randrange(vocabulary) for _ in range(n)]
    has_value = bytearray(rng.random() < 0.8 for _ in range(n))
    skeleton = Skeleton(Path("x.jsonl"), {"t": "header"})
    skeleton.primary = array("q", (k % 7 for k in keys))
    skeleton.signature = array("q", (k % 3 for k in keys))
    skeleton.value = array("q", keys)
    skeleton.fine_value = array("q", keys)
    skeleton.named = array("q", (k % 5 if k % 2 else 0 for k in keys))
    skeleton.coarse = array("q", (k // 2 for k in keys))
    skeleton.coarse_shifted = array("q", ((k + 1) // 2 for k in keys))
    skeleton.has_value = has_value
    skeleton.source = array("q", (rng.randrange(4) for _ in range(n)))
    skeleton.is_region = bytearray(n)
    skeleton.backward = bytearray(rng.random() < 0.5 for _ in range(n))
    skeleton.length = n
    return skeleton


def _edited(rng: random.Random, a: Skeleton, vocabulary: int) -> Skeleton:
    """B: A with some records replaced by others, so the traces share most keys but not all."""
    b = _skeleton(rng, len(a), vocabulary)
    for k in range(len(a)):
        if rng.random() < 0.7:
            for column in ("primary", "signature", "value", "fine_value", "named", "coarse", "coarse_shifted",
                           "has_value", "source", "backward"):
                getattr(b, column)[k] = getattr(a, column)[k]
    return b


@pytest.mark.parametrize("seed", range(6))
def test_a_trial_aligned_in_its_span_equals_the_whole_alignment_without_its_pairs(seed: int) -> None:
    rng = random.Random(seed)
    a = _skeleton(rng, 400, 40)
    b = _edited(rng, a, 40)
    value_pairs = aligner._value_pairs(a, b)
    assert len(value_pairs) > 20
    for _ in range(10):
        first = rng.randrange(1, len(value_pairs) - 5)
        last = first + rng.randrange(1, 5)
        dropped = {p for p in value_pairs[first:last] if rng.random() < 0.7} or {value_pairs[first]}
        whole = aligner._refined([p for p in value_pairs if p not in dropped], a, b)
        span = (value_pairs[first - 1], value_pairs[last])
        kept_inside = [p for p in value_pairs[first:last] if p not in dropped]
        partner, tier = aligner._refined(kept_inside, a, b, span)
        inside = slice(span[0][0] + 1, span[1][0])
        assert (partner, tier) == (whole[0][inside], whole[1][inside])


def _pivots_pair_by_pair(partner: array, tier: bytearray, len_b: int) -> list[tuple[int, int]]:
    """The pivots' definition, one pair at a time (what `_pivots` finds on byte masks)."""
    paired = [(i, j) for i, j in enumerate(partner) if j >= 0]
    found = []
    for k, (i, j) in enumerate(paired):
        ip, jp = paired[k - 1] if k else (-1, -1)
        i_next, j_next = paired[k + 1] if k + 1 < len(paired) else (len(partner), len_b)
        stretch = aligner._PIVOT_STRETCH
        if tier[i] == aligner.VALUE_TIER and (
                (j - jp - 1 >= stretch and i_next - i - 1 >= stretch) or (i - ip - 1 >= stretch and j_next - j - 1 >= stretch)):
            found.append((i, j))
    return found


def test_pivots_found_on_masks_are_those_of_their_definition() -> None:
    found = 0
    for seed in range(8):
        rng = random.Random(seed)
        a = _skeleton(rng, 600, 25)
        b = _edited(rng, a, 25)
        partner, tier = aligner._refined(aligner._value_pairs(a, b), a, b)
        expected = _pivots_pair_by_pair(partner, tier, len(b))
        assert aligner._pivots(partner, tier, len(b)) == expected
        found += len(expected)
    assert found  # the cases have pivots


def test_the_unpaired_mask_marks_each_unpaired_record() -> None:
    partner = array("q", [-1, 0, 5, -1, -1, 2**40, -1])
    assert aligner._unpaired_mask(partner) == bytes([0xFF, 0, 0, 0xFF, 0xFF, 0, 0xFF])
