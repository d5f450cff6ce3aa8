"""Fingerprint comparison under tolerances."""

from __future__ import annotations

import torch

from tracediff.config import EXACT, Tolerance
from tracediff.diff.compare import compare_fingerprints
from tracediff.record.fingerprints.fingerprint import fingerprint

F32 = Tolerance(1e-4, 1e-6)


def _fp(t: torch.Tensor) -> dict:
    fp = fingerprint(t, exact=True)
    assert fp is not None
    return fp


def test_reordered_float32_sum_noise_passes() -> None:
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    y = x * (1 + 1e-7)
    result = compare_fingerprints(_fp(x), _fp(y), F32)
    assert result.ok and result.rel_diff < 1e-4


def test_wrong_op_fails_and_names_the_tolerance() -> None:
    x = torch.randn(100, generator=torch.Generator().manual_seed(0))
    result = compare_fingerprints(_fp(torch.cos(x)), _fp(torch.sin(x)), F32)
    assert not result.ok
    assert result.rel_diff > 0.01
    assert "rtol=0.0001" in result.describe()


def test_single_element_error_is_caught() -> None:
    x = torch.ones(10_000)
    y = x.clone()
    y[17] = 5.0
    assert not compare_fingerprints(_fp(x), _fp(y), F32).ok


def test_nan_never_passes_silently() -> None:
    x = torch.ones(4)
    y = x.clone()
    y[0] = float("nan")
    result = compare_fingerprints(_fp(x), _fp(y), Tolerance(1.0, 1.0))
    assert not result.ok and result.nonfinite


def test_same_nans_agree() -> None:
    x = torch.tensor([1.0, float("nan")])
    assert compare_fingerprints(_fp(x), _fp(x.clone()), F32).ok


def test_cancelling_sum_is_judged_against_l1() -> None:
    x = torch.tensor([1e6, -1e6, 1e-3])
    y = torch.tensor([1e6, -1e6, 1.1e-3])
    # the sums differ by 10%, but relative to the magnitudes summed it is 5e-11
    assert compare_fingerprints(_fp(x), _fp(y), F32).ok


def test_exact_uses_the_hash() -> None:
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([2.0, 1.0])
    assert not compare_fingerprints(_fp(a), _fp(b), EXACT).ok
    assert compare_fingerprints(_fp(a), _fp(a.clone()), EXACT).ok


def test_integers_compare_exactly() -> None:
    a = torch.arange(10)
    b = a.clone()
    b[3] += 1
    assert not compare_fingerprints(_fp(a), _fp(b), EXACT).ok


def test_equal_fingerprints_are_judged_as_their_statistics_would_be() -> None:
    """Equal fingerprints take a short cut; its result is what comparing their statistics one by one gives
    (a key the comparison ignores, on one side only, makes the two unequal and takes the long way)."""
    x = torch.randn(257, generator=torch.Generator().manual_seed(3))
    cases = [_fp(x), _fp(torch.zeros(8)), _fp(torch.full((4,), float("inf"))), _fp(x.double() * 1e300 * 1e10)]
    for fp in cases:
        for tolerance, noise in ((F32, None), (F32, 1e-6), (Tolerance(0.0, 0.0), None), (Tolerance(0.0, 0.0), 0.0)):
            short_cut = compare_fingerprints(fp, dict(fp), tolerance, noise)
            long_way = compare_fingerprints(fp, dict(fp, unrelated=1), tolerance, noise)
            assert short_cut == long_way, (fp, tolerance, noise)


def test_sketches_of_values_past_1e154_are_infinitely_apart_not_a_crash() -> None:
    """`scan_cumsum.py` under --calibrate: a cumulative product overflows float32 to inf in the program and stays
    finite (1e200) in the float64 reference; squaring their sketches' difference raised OverflowError in the diff."""
    from tracediff.diff.compare import sketch_distance

    assert sketch_distance({"sk": [1e200, 0.0]}, {"sk": [-1e200, 0.0]}) == float("inf")
    assert sketch_distance({"sk": [3.0, 0.0]}, {"sk": [0.0, 4.0]}) == (12.5) ** 0.5  # sqrt((9 + 16) / 2)
