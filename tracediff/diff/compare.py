"""Compare two tensor fingerprints under a tolerance; the result is a value.

Each statistic is judged against a scale it is relative to: `sum` against
`l1` (a sum can cancel to ~0 while its terms are large), the others against
themselves, and the L2 distance estimated from the sketches against `l2`
(so `rtol` bounds ||a - b|| / ||a|| as well). `atol` is per element, so it grows with the element count for the
summed statistics. NaN and Inf never pass silently: their counts must match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tracediff.config import Tolerance
from tracediff.trace.schema import Fingerprint

_TINY = 1e-30


@dataclass(frozen=True)
class TensorComparison:
    ok: bool
    rel_diff: float  # largest |a-b| / scale over the statistics
    tolerance: Tolerance
    statistic: str  # the statistic that broke the tolerance (or the worst one)
    nonfinite: bool  # the NaN/Inf counts differ
    noise: float | None = None  # calibrated: the reference's own relative error here (diff/noise.py)
    above_noise: float | None = None  # calibrated: the difference in multiples of that noise
    by_noise: bool = False  # passed only because the calibrated noise allows it
    # The largest difference over the statistics in multiples of what was allowed (over 1: not ok).
    times_allowed: float = math.inf

    def describe(self) -> str:
        verdict = "within" if self.ok else "exceeds"
        if self.nonfinite:
            return f"NaN/Inf counts differ ({verdict} tolerance {self.tolerance})"
        text = f"rel diff {self.rel_diff:.3g} on {self.statistic} {verdict} {self.tolerance}"
        if self.noise is not None:
            times = "inf" if self.above_noise is None or not math.isfinite(self.above_noise) else f"{self.above_noise:.3g}"
            text += f"; {times}x above noise (reference's own error {self.noise:.2g})"
        return text


@dataclass(frozen=True)
class TensorDiff:
    """One disagreeing tensor of a paired record."""

    side: str  # "input" or "output"
    arg: str
    dtype: str
    shape: tuple[int, ...]
    a: Fingerprint  # the tensor's fingerprint in A
    b: Fingerprint
    comparison: TensorComparison


def compare_fingerprints(a: Fingerprint, b: Fingerprint, tolerance: Tolerance, noise: float | None = None,
                         factor: float = 10.0) -> TensorComparison:
    """Judge b against a. With `noise` (calibrated, relative), each statistic may differ by
    max(its tolerance, factor * noise * scale); NaN/Inf counts must still match."""
    if a.get("nan") != b.get("nan") or a.get("inf") != b.get("inf"):
        return TensorComparison(False, math.inf, tolerance, "nan/inf", True)
    if a.get("n") != b.get("n"):
        return TensorComparison(False, math.inf, tolerance, "n", False)
    if "hash" in a and "hash" in b and tolerance.rtol == 0 and tolerance.atol == 0:
        same = a["hash"] == b["hash"]
        return TensorComparison(same, 0.0 if same else math.inf, tolerance, "hash", False,
                                times_allowed=0.0 if same else math.inf)
    if a == b and all(x == x for x in (a["sum"], a["l1"], a["l2"], a["max"])):  # x == x: not NaN
        # The same statistics (the common case: most ops compute bit for bit alike): every difference is 0.
        if noise is None:
            return TensorComparison(True, 0.0, tolerance, "sum", False, times_allowed=0.0)
        return TensorComparison(True, 0.0, tolerance, "sum", False, noise, 0.0, False, 0.0)
    n = max(int(a.get("n") or 0), 1)
    l2_scale = max(abs(a["l2"]), abs(b["l2"]))
    # statistic -> (|a - b|, the scale it is relative to, atol summed over the elements it covers)
    entries = {
        "sum": (abs(a["sum"] - b["sum"]), max(abs(a["l1"]), abs(b["l1"])), tolerance.atol * n),
        "l1": (abs(a["l1"] - b["l1"]), max(abs(a["l1"]), abs(b["l1"])), tolerance.atol * n),
        "l2": (abs(a["l2"] - b["l2"]), l2_scale, tolerance.atol * math.sqrt(n)),
        "max": (abs(a["max"] - b["max"]), max(abs(a["max"]), abs(b["max"])), tolerance.atol),
    }
    distance = sketch_distance(a, b)
    if distance is not None:  # ||a - b|| estimated, relative to ||a||: scattered differences
        entries["l2 distance"] = (distance, l2_scale, tolerance.atol * math.sqrt(n))
    worst_rel, worst_stat, ok, by_noise, times_allowed = 0.0, "sum", True, False, 0.0
    for stat, (diff, scale, atol) in entries.items():
        if not math.isfinite(diff):  # finite stats overflowed float64: compare exactly
            diff = 0.0 if stat == "l2 distance" or a.get(stat) == b.get(stat) else math.inf
        rel = diff / max(scale, _TINY)
        floor = atol + tolerance.rtol * scale
        allowed = floor if noise is None else max(floor, factor * noise * scale)
        by_noise = by_noise or floor < diff <= allowed
        times_allowed = max(times_allowed, diff / allowed if allowed > 0 else (0.0 if diff == 0 else math.inf))
        if diff > allowed:
            if ok or rel > worst_rel:
                worst_rel, worst_stat = rel, stat
            ok = False
        elif ok and rel > worst_rel:
            worst_rel, worst_stat = rel, stat
    if noise is None:
        return TensorComparison(ok, worst_rel, tolerance, worst_stat, False, times_allowed=times_allowed)
    above = worst_rel / noise if noise > 0 else (0.0 if worst_rel == 0 else math.inf)
    return TensorComparison(ok, worst_rel, tolerance, worst_stat, False, noise, above, ok and by_noise, times_allowed)


def sketch_distance(a: Fingerprint, b: Fingerprint) -> float | None:
    """||a - b|| estimated from the two sketches (record/fingerprints/fingerprint.py), or None without both. Sketches of
    different widths (traces recorded before the sketch widened) share their first sums: those are used."""
    ska, skb = a.get("sk"), b.get("sk")
    if not ska or not skb:
        return None
    width = min(len(ska), len(skb))
    # `d * d`, not `d ** 2`: past 1e154 a square is inf where `**` raises OverflowError (a float64 reference run
    # of a cumulative product that overflows float32, under --calibrate).
    return math.sqrt(sum((x - y) * (x - y) for x, y in zip(ska[:width], skb[:width])) / width)


def has_nonfinite(fp: Fingerprint | None) -> bool:
    return fp is not None and bool(fp.get("nan") or fp.get("inf"))
