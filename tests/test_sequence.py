"""`align_sequences`: invariants, exactness on small inputs, and the long-input paths (walk, far resync, fallbacks)."""

from __future__ import annotations

import difflib
import random
from bisect import bisect_left
from collections.abc import Hashable, Sequence

import pytest

from tracediff.diff.sequence import align_sequences

Key = Hashable


def lcs_length(a: Sequence[Key], b: Sequence[Key]) -> int:
    """Brute-force O(n*m) dynamic programme."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def lis_length(values: Sequence[int]) -> int:
    tails: list[int] = []
    for v in values:
        k = bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
        else:
            tails[k] = v
    return len(tails)


def aligned(a: Sequence[Key], b: Sequence[Key], **kw: int) -> list[tuple[int, int]]:
    """align_sequences plus the invariants every result must satisfy."""
    pairs = align_sequences(a, b, **kw)
    assert isinstance(pairs, list)
    pi = pj = -1
    for i, j in pairs:
        assert 0 <= i < len(a) and 0 <= j < len(b)
        assert i > pi and j > pj, "pairs must be strictly increasing in both sequences"
        assert a[i] == b[j]
        pi, pj = i, j
    return pairs


def op(name: str, *shapes: tuple[int, ...]) -> Key:
    return (f"aten::{name}", tuple(shapes))


def vocab(rng: random.Random, size: int) -> list[Key]:
    names = ["addmm", "mm", "add", "mul", "gelu", "relu", "view", "t", "softmax", "layer_norm", "cat", "sum"]
    keys: set[Key] = set()
    while len(keys) < size:
        keys.add(op(rng.choice(names), *[(rng.randint(1, 9), rng.randint(1, 9)) for _ in range(rng.randint(1, 2))]))
    return sorted(keys)


def scatter_edits(rng: random.Random, seq: list[Key], keys: list[Key], edits: int) -> tuple[list[Key], int]:
    """Random insert/delete/substitute edits; returns the edited copy and the count of untouched originals."""
    out = list(seq)
    touched = 0
    for pos in sorted(rng.sample(range(len(seq)), edits), reverse=True):
        kind = rng.randrange(3)
        if kind == 0:
            out.insert(pos, rng.choice(keys))
        elif kind == 1:
            del out[pos]
            touched += 1
        else:
            out[pos] = ("aten::renamed", (pos,))
            touched += 1
    return out, len(seq) - touched


# --------------------------------------------------------------------------- basics


def test_identical() -> None:
    a = [op("addmm", (4, 4)), op("relu", (4, 4)), op("addmm", (4, 4))] * 50
    assert aligned(a, list(a)) == [(i, i) for i in range(len(a))]


def test_empty_and_one_empty() -> None:
    assert aligned([], []) == []
    assert aligned(["x", "y"], []) == []
    assert aligned([], ["x", "y"]) == []


def test_no_common_key() -> None:
    assert aligned(["a", "b", "c"], ["d", "e"]) == []


def test_pure_insertions() -> None:
    a = list("abcdefgh")
    b = list("aXbcdYYYefghZ")
    pairs = aligned(a, b)
    assert [b[j] for _, j in pairs] == a
    assert [i for i, _ in pairs] == list(range(len(a)))


def test_pure_deletions() -> None:
    a = list("aXbcdYYYefghZ")
    b = list("abcdefgh")
    pairs = aligned(a, b)
    assert [a[i] for i, _ in pairs] == b


def test_substitutions() -> None:
    a = [op("addmm", (4, 4)), op("relu", (4, 4)), op("mm", (4, 4)), op("add", (4, 4)), op("sum", (4,))]
    b = [op("addmm", (4, 4)), op("gelu", (4, 4)), op("mm", (4, 4)), op("add", (8, 8)), op("sum", (4,))]
    assert aligned(a, b) == [(0, 0), (2, 2), (4, 4)]


def test_reordering_keeps_the_longer_block() -> None:
    a = [f"p{i}" for i in range(30)] + [f"q{i}" for i in range(10)]
    b = [f"q{i}" for i in range(10)] + [f"p{i}" for i in range(30)]
    pairs = aligned(a, b)
    assert len(pairs) == 30
    assert all(a[i].startswith("p") for i, _ in pairs)


def test_repeated_keys() -> None:
    a = ["x"] * 10 + ["y"] + ["x"] * 5
    b = ["x"] * 7 + ["y"] * 3 + ["x"] * 9
    assert len(aligned(a, b)) == lcs_length(a, b) == 15


def test_unique_anchors_among_repeats() -> None:
    a = ["r", "r", "u1", "r", "s", "u2", "s", "r"]
    b = ["r", "u1", "s", "r", "u2", "r", "s"]
    assert len(aligned(a, b)) == lcs_length(a, b)


def test_tuple_keys_compare_by_value() -> None:
    a = [("aten::addmm", ((4, 4),)), ("aten::relu", ((4, 4),))]
    b = [("aten::addmm", ((4, 4),)), ("aten::relu", ((4, 5),)), ("aten::relu", ((4, 4),))]
    assert aligned(a, b) == [(0, 0), (1, 2)]


def test_negative_budget_rejected() -> None:
    with pytest.raises(ValueError):
        align_sequences([1], [1], max_edit_cost=-1)


# --------------------------------------------------------------------------- exactness on small inputs


@pytest.mark.parametrize("alphabet", [1, 2, 3, 5, 12])
def test_matches_brute_force_lcs_on_random_small_inputs(alphabet: int) -> None:
    rng = random.Random(1000 + alphabet)
    for _ in range(300):
        a = [rng.randrange(alphabet) for _ in range(rng.randint(0, 25))]
        b = [rng.randrange(alphabet) for _ in range(rng.randint(0, 25))]
        pairs = aligned(a, b)
        assert len(pairs) == lcs_length(a, b), (a, b, pairs)
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        assert len(pairs) >= sum(block.size for block in matcher.get_matching_blocks())


def test_matches_brute_force_lcs_on_edited_inputs() -> None:
    rng = random.Random(7)
    keys = vocab(rng, 20)
    for _ in range(60):
        a = [rng.choice(keys) for _ in range(rng.randint(20, 120))]
        b, _ = scatter_edits(rng, a, keys, rng.randint(0, 15))
        assert len(aligned(a, b)) == lcs_length(a, b)


def test_matches_brute_force_lcs_on_medium_inputs() -> None:
    # 300 x 300 cells: still the exact bit-parallel path.
    rng = random.Random(11)
    for alphabet in (2, 4, 40):
        a = [rng.randrange(alphabet) for _ in range(300)]
        b = [rng.randrange(alphabet) for _ in range(280)]
        assert len(aligned(a, b)) == lcs_length(a, b)


# --------------------------------------------------------------------------- long inputs (walk and fallbacks)


def test_long_sequence_with_scattered_edits_keeps_all_untouched_ops() -> None:
    rng = random.Random(3)
    keys = vocab(rng, 300)
    a = [rng.choice(keys) for _ in range(20_000)]
    b, untouched = scatter_edits(rng, a, keys, 60)
    pairs = aligned(a, b)
    assert len(pairs) >= untouched
    assert len(pairs) <= min(len(a), len(b))


def test_long_layered_trace_with_edits() -> None:
    rng = random.Random(4)
    keys = vocab(rng, 60)
    layers = [[rng.choice(keys) for _ in range(rng.randint(20, 50))] for _ in range(4)]
    a: list[Key] = []
    while len(a) < 15_000:
        a.extend(layers[rng.randrange(4)])
    b, untouched = scatter_edits(rng, a, keys, 40)
    assert len(aligned(a, b)) >= untouched


def test_small_budget_still_valid_and_close() -> None:
    rng = random.Random(5)
    keys = vocab(rng, 100)
    a = [rng.choice(keys) for _ in range(5_000)]
    b, untouched = scatter_edits(rng, a, keys, 100)
    for budget in (0, 3, 50):
        assert len(aligned(a, b, max_edit_cost=budget)) >= untouched - 20


def test_large_inserted_block_beyond_the_exhaustive_radius() -> None:
    rng = random.Random(6)
    keys = vocab(rng, 200)
    a = [rng.choice(keys) for _ in range(30_000)]
    block = [("aten::inserted", (k,)) for k in range(3_000)]
    b = a[:12_345] + block + a[12_345:]
    pairs = aligned(a, b, max_edit_cost=100)
    assert len(pairs) == len(a)


def test_moved_block() -> None:
    rng = random.Random(8)
    keys = vocab(rng, 300)
    a = [rng.choice(keys) for _ in range(12_000)]
    b = a[:2_000] + a[5_000:] + a[2_000:5_000]  # 3000 ops moved to the end
    assert len(aligned(a, b)) >= 9_000


def test_short_sequence_embedded_in_long_one() -> None:
    rng = random.Random(9)
    b = [rng.randrange(300) for _ in range(60_000)]
    a = b[::37]
    assert len(aligned(a, b)) >= 0.95 * len(a)


def test_permutations_use_unique_anchors() -> None:
    # No common 8-gram: the walk falls back to patience anchoring, which is exact for permutations.
    rng = random.Random(10)
    a = list(range(3_000))
    b = list(a)
    rng.shuffle(b)
    where = {x: j for j, x in enumerate(b)}
    assert len(aligned(a, b)) == lis_length([where[x] for x in a])


# --------------------------------------------------------------------------- adversarial (invariants only)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda r: (["x"] * 3000, ["x"] * 2500), id="one-key"),
        pytest.param(lambda r: (["x"] * 3000 + ["y"], ["y"] + ["x"] * 2999), id="one-key-moved-marker"),
        pytest.param(lambda r: (["x"] * 1500 + ["y"] * 1500, ["y"] * 1500 + ["x"] * 1500), id="swapped-halves"),
        pytest.param(lambda r: (["x", "y"] * 1500, ["y", "x"] * 1500), id="alternating"),
        pytest.param(lambda r: ([("a", k % 50) for k in range(4000)], [("b", k % 50) for k in range(4000)]), id="disjoint"),
        pytest.param(lambda r: ([r.randrange(300) for _ in range(4000)], [r.randrange(300) for _ in range(4000)]),
                     id="unrelated-same-vocab"),
        pytest.param(lambda r: ([r.randrange(2) for _ in range(4000)], [r.randrange(2) for _ in range(4000)]),
                     id="unrelated-two-keys"),
        pytest.param(lambda r: (list(range(4000)), list(range(3999, -1, -1))), id="reversed"),
    ],
)
@pytest.mark.parametrize("budget", [0, 2000])
def test_adversarial_inputs_keep_invariants(make, budget: int) -> None:
    a, b = make(random.Random(12))
    pairs = aligned(a, b, max_edit_cost=budget)
    assert len(pairs) <= min(len(a), len(b))


def test_adversarial_known_optima() -> None:
    assert len(aligned(["x"] * 3000, ["x"] * 2500)) == 2500
    assert len(aligned(["x"] * 3000 + ["y"], ["y"] + ["x"] * 2999)) == 2999
    assert len(aligned(["x"] * 1500 + ["y"] * 1500, ["y"] * 1500 + ["x"] * 1500)) == 1500
    assert len(aligned(["x", "y"] * 1500, ["y", "x"] * 1500)) == 2999
    assert aligned([("a", k % 50) for k in range(4000)], [("b", k % 50) for k in range(4000)]) == []


def test_oversized_replaced_block_is_aligned_as_a_sub_range() -> None:
    rng = random.Random(13)
    keys = vocab(rng, 300)
    a = [rng.choice(keys) for _ in range(20_000)]
    b = list(a)
    b[7_000:7_400] = [rng.choice(keys) for _ in range(400)]  # 400 x 400 box > the 2**16-cell exact budget
    pairs = aligned(a, b, max_edit_cost=100)
    assert len(pairs) >= len(a) - 400


def test_exhaustive_search_that_finds_nothing() -> None:
    rng = random.Random(14)
    a = [rng.randrange(300) for _ in range(5_000)]
    b = [rng.randrange(300) for _ in range(5_000)]
    pairs = aligned(a, b, max_edit_cost=10_000)  # radius covers the whole range, no common 8-gram
    assert 0 < len(pairs) <= 5_000
