"""Fingerprints: every tensor kind the issue lists, and what they can tell apart."""

from __future__ import annotations

import math

import pytest
import torch

from tracediff.config import Tolerance
from tracediff.diff.compare import compare_fingerprints, sketch_distance
from tracediff.record.fingerprints.fingerprint import SKETCH_WIDTH, content_hash, fingerprint, sketch_signs


@pytest.mark.parametrize(
    "tensor",
    [
        torch.arange(6, dtype=torch.int64).reshape(2, 3),
        torch.tensor([True, False, True]),
        torch.tensor([1 + 2j, -3 - 4j], dtype=torch.complex64),
        torch.empty(0, 4),
        torch.tensor(3.5),
        torch.arange(12.0).reshape(3, 4).t(),  # non-contiguous view
        torch.arange(8.0)[::2],
        torch.ones(4, dtype=torch.bfloat16),
        torch.ones(4, dtype=torch.float16),
        torch.ones(4, dtype=torch.uint8),
    ],
    ids=["int64", "bool", "complex", "empty", "0-dim", "transposed", "strided", "bf16", "fp16", "uint8"],
)
def test_every_kind_of_tensor_gets_plain_numbers(tensor: torch.Tensor) -> None:
    fp = fingerprint(tensor, exact=True)
    assert fp is not None
    assert set(fp) == {"sum", "l1", "l2", "max", "nan", "inf", "n", "sk", "hash"}
    assert all(isinstance(fp[k], float) for k in ("sum", "l1", "l2", "max"))
    assert len(fp["sk"]) == SKETCH_WIDTH and all(isinstance(v, float) for v in fp["sk"])
    assert fp["n"] == tensor.numel() * (2 if tensor.is_complex() else 1)


def test_statistics_are_what_they_say() -> None:
    fp = fingerprint(torch.tensor([3.0, -4.0]))
    signs = sketch_signs()
    sk = [3.0 * float(signs[0, j]) - 4.0 * float(signs[1, j]) for j in range(SKETCH_WIDTH)]
    assert fp == {"sum": -1.0, "l1": 7.0, "l2": 5.0, "max": 4.0, "nan": 0, "inf": 0, "n": 2, "sk": sk}


def test_nan_and_inf_are_counted_and_excluded_from_the_sums() -> None:
    fp = fingerprint(torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 2.0]))
    assert fp["nan"] == 1 and fp["inf"] == 2
    assert fp["sum"] == 3.0 and math.isfinite(fp["l2"])


def test_all_nan_tensor() -> None:
    fp = fingerprint(torch.full((3,), float("nan")))
    assert fp["nan"] == 3 and fp["sum"] == 0.0


def test_view_and_copy_fingerprint_alike() -> None:
    base = torch.randn(5, 7)
    assert fingerprint(base.t()) == fingerprint(base.t().contiguous())
    assert content_hash(base.t()) == content_hash(base.t().contiguous())


def test_hash_tells_apart_what_sums_cannot() -> None:
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([2.0, 1.0])
    fa, fb = fingerprint(a), fingerprint(b)
    assert fa["sk"] != fb["sk"]  # the sketch depends on where each value is
    fa.pop("sk"), fb.pop("sk")
    assert fa == fb  # a permutation keeps every other statistic
    assert content_hash(a) != content_hash(b)


def test_meta_and_fake_tensors_have_no_fingerprint() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert fingerprint(torch.empty(3, device="meta")) is None
    with FakeTensorMode():
        fake = torch.empty(3)
    assert fingerprint(fake) is None


def test_float64_accumulation_sees_small_float32_differences() -> None:
    x = torch.full((10_000,), 1.0)
    y = x.clone()
    y[1234] += 1e-3
    assert fingerprint(x)["sum"] != fingerprint(y)["sum"]


def test_the_sketch_sees_a_difference_scattered_with_mixed_signs() -> None:
    """HF Llama with its rotary cos off by 1%: logits differ by 2e-4 (L2, relative), while sum,
    l1, l2 and max move by under 1e-5. The sketch estimates ||a - b|| at first order."""
    a = torch.randn(2, 16, 100, generator=torch.Generator().manual_seed(0))
    scattered = torch.randn(a.shape, generator=torch.Generator().manual_seed(1))
    b = a + 4e-4 * a.norm() / a.numel() ** 0.5 * scattered * (a.abs() < 2)  # the largest values untouched
    fa, fb = fingerprint(a), fingerprint(b)
    tolerance = Tolerance(rtol=1e-4, atol=1e-6)
    blind = {k: v for k, v in fa.items() if k != "sk"}, {k: v for k, v in fb.items() if k != "sk"}
    assert compare_fingerprints(*blind, tolerance).ok  # sum, l1, l2 and max alone see no difference
    result = compare_fingerprints(fa, fb, tolerance)
    assert not result.ok and result.statistic == "l2 distance"
    assert 1e-4 < result.rel_diff < 1e-3
    assert compare_fingerprints(fa, fingerprint(a + 1e-7 * scattered), tolerance).ok


def test_the_sketch_follows_row_major_order_and_sums_large_tensors_exactly() -> None:
    x = torch.randn(3, 5000, generator=torch.Generator().manual_seed(2))
    assert fingerprint(x.t())["sk"] == fingerprint(x.t().contiguous())["sk"]
    assert fingerprint(x.t())["sk"] != fingerprint(x)["sk"]
    big = torch.randn(3_000_000, generator=torch.Generator().manual_seed(3))
    same = compare_fingerprints(fingerprint(big), fingerprint(big.clone()), Tolerance(rtol=1e-9, atol=0.0))
    assert same.ok, same.describe()


def test_the_sketch_rarely_underestimates_a_scattered_distance() -> None:
    """CPU GPT-2 training step under inductor, bench seed 10 (g3n125): a fault moved the position embedding's
    gradient 1.6 times beyond the tolerance (exact L2 distance) while a sketch of four sums estimated 0.31
    times the true distance, and the gradient passed as agreeing. Over 400 random scattered differences of
    that shape, one estimate in twenty falls under 0.7 times the truth with sixteen sums (its 5% quantile
    is 0.71 in theory, sqrt(chi2_16 / 16)); with the first four alone, under 0.45 (0.42 in theory)."""
    gen = torch.Generator().manual_seed(0)
    ratios: dict[int, list[float]] = {4: [], SKETCH_WIDTH: []}
    for _ in range(400):
        a = torch.randn(32, 64, generator=gen)
        b = a.clone()
        picked = torch.randperm(a.numel(), generator=gen)[:960]  # half the elements move, mixed signs
        b.view(-1)[picked] += 1e-4 * torch.randn(960, generator=gen)
        fa, fb = fingerprint(a), fingerprint(b)
        true = float((a.double() - b.double()).norm())
        for width, found in ratios.items():
            found.append(sketch_distance(dict(fa, sk=fa["sk"][:width]), dict(fb, sk=fb["sk"][:width])) / true)
    low = {width: float(torch.tensor(found).quantile(0.05)) for width, found in ratios.items()}
    assert low[SKETCH_WIDTH] > 0.65 and low[4] < 0.5, low


def test_sketches_of_another_width_compare_on_the_sums_they_share() -> None:
    """A trace recorded when the sketch had four sums compares with one recorded now."""
    a = torch.randn(100, generator=torch.Generator().manual_seed(1))
    b = a + 1e-3
    fa, fb = fingerprint(a), fingerprint(b)
    old = dict(fa, sk=fa["sk"][:4])
    assert fa["sk"][:4] == old["sk"]  # the first four sums are the ones a four-sum sketch held
    assert sketch_distance(old, fb) == pytest.approx(sketch_distance(dict(fa, sk=fa["sk"][:4]), dict(fb, sk=fb["sk"][:4])))


@pytest.mark.parametrize("value", [
    torch.tensor(3.5), torch.tensor([-2.25]), torch.tensor([[1.5]], dtype=torch.float16), torch.tensor(0.1, dtype=torch.bfloat16),
    torch.tensor(7), torch.tensor(2**60 + 1), torch.tensor(True), torch.tensor(-0.0), torch.tensor(1e200, dtype=torch.float64),
    torch.tensor(float("nan")), torch.tensor(float("-inf")), torch.tensor(1 + 2j),
])
def test_a_one_element_tensor_gets_the_fingerprint_the_torch_ops_give(value: torch.Tensor) -> None:
    """A scalar's fingerprint is worked out from its value in Python (a dozen torch ops cost 40 us): the same
    numbers as the torch ops' path, which a two-element tensor holding it and a zero still takes."""
    fp = fingerprint(value)
    assert fp is not None
    padded = fingerprint(torch.cat([value.reshape(-1), torch.zeros(1, dtype=value.dtype)]))  # position 1 adds nothing
    assert padded is not None
    for key in ("sum", "l1", "l2", "max", "nan", "inf"):
        assert fp[key] == padded[key], key
    assert fp["n"] == padded["n"] - (2 if value.is_complex() else 1)
    if not (value.is_complex() or fp["nan"] or fp["inf"]):  # one real element: each signed sum is its value, signed
        assert fp["sk"] == [sign * fp["sum"] for sign in sketch_signs()[0].tolist()]


def test_the_scratch_hands_out_its_buffer_again_and_fingerprints_stay_right() -> None:
    from tracediff.record.fingerprints.fingerprint import Scratch

    scratch = Scratch(limit_bytes=1 << 20)
    first = scratch.take(5000, torch.float32, Scratch.ABS)
    assert scratch.take(5000, torch.float32, Scratch.ABS) is first  # the same view, no slice
    other = scratch.take(5000, torch.float64, Scratch.ABS)
    assert other is not first and other.dtype == torch.float64 and other.numel() == 5000
    assert scratch.take(300_000, torch.float32, Scratch.ABS).numel() == 300_000  # past the limit: a fresh tensor
    torch.manual_seed(0)
    tensors = [torch.randn(5000), torch.randn(5000) * 3, torch.randn(70, 80).t(), torch.randn(9000)]
    for t in tensors:
        assert fingerprint(t, scratch=scratch) == fingerprint(t), t.shape


def test_a_batch_of_rows_fills_placeholders_as_from_stats_makes_fingerprints() -> None:
    """The device batch's fill: the same values, types and key order (the trace's bytes) as `from_stats`, row by row."""
    from tracediff.record.fingerprints.fingerprint import fill_from_rows, from_stats

    rows = torch.randn(5, 6 + SKETCH_WIDTH, dtype=torch.float64)
    rows[:, 2] = rows[:, 2].abs()
    rows[:, 4:6] = torch.tensor([[0.0, 0.0], [3.0, 1.0], [0.0, 7.0], [2.0, 0.0], [0.0, 0.0]])
    rows[4, 0] = math.inf  # an overflowed sum stays what it is
    listed = rows.tolist()
    slots = [({}, n) for n in (1, 10, 100, 1000, 10000)]
    fill_from_rows(slots, listed)
    for (filled, n), row in zip(slots, listed):
        expected = from_stats(row, n)
        assert list(filled.items()) == list(expected.items())
        assert [type(v) for v in filled.values()] == [type(v) for v in expected.values()]
