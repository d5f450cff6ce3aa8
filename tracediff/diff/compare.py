"""Compare two tensor fingerprints under a tolerance; the result is a value.

Each statistic is judged against a scale it is relative to: `sum` against
`l1` (a sum can cancel to ~0 while its terms are large), the others against
themselves. `atol` is per element, so it grows with the element count for the
summed statistics. NaN and Inf never pass silently: their counts must match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tracediff.config import Tolerance

_TINY = 1e-30


@dataclass(frozen=True)
class TensorComparison:
    ok: bool
    rel_diff: float  # largest |a-b| / scale over the statistics
    tolerance: Tolerance
    statistic: str  # the statistic that broke the tolerance (or the worst one)
    nonfinite: bool  # the NaN/Inf counts differ

    def describe(self) -> str:
        verdict = "within" if self.ok else "exceeds"
        if self.nonfinite:
            return f"NaN/Inf counts differ ({verdict} tolerance {self.tolerance})"
        return f"rel diff {self.rel_diff:.3g} on {self.statistic} {verdict} {self.tolerance}"


def compare_fingerprints(a: dict[str, Any], b: dict[str, Any], tolerance: Tolerance) -> TensorComparison:
    if a.get("nan") != b.get("nan") or a.get("inf") != b.get("inf"):
        return TensorComparison(False, math.inf, tolerance, "nan/inf", True)
    if a.get("n") != b.get("n"):
        return TensorComparison(False, math.inf, tolerance, "n", False)
    if "hash" in a and "hash" in b and tolerance.rtol == 0 and tolerance.atol == 0:
        same = a["hash"] == b["hash"]
        return TensorComparison(same, 0.0 if same else math.inf, tolerance, "hash", False)
    n = max(int(a.get("n") or 0), 1)
    scales = {
        "sum": (max(abs(a["l1"]), abs(b["l1"])), tolerance.atol * n),
        "l1": (max(abs(a["l1"]), abs(b["l1"])), tolerance.atol * n),
        "l2": (max(abs(a["l2"]), abs(b["l2"])), tolerance.atol * math.sqrt(n)),
        "max": (max(abs(a["max"]), abs(b["max"])), tolerance.atol),
    }
    worst_rel, worst_stat, ok = 0.0, "sum", True
    for stat, (scale, atol) in scales.items():
        diff = abs(a[stat] - b[stat])
        if not math.isfinite(diff):  # finite stats overflowed float64: compare exactly
            diff = 0.0 if a[stat] == b[stat] else math.inf
        rel = diff / max(scale, _TINY)
        if diff > atol + tolerance.rtol * scale:
            if ok or rel > worst_rel:
                worst_rel, worst_stat = rel, stat
            ok = False
        elif ok and rel > worst_rel:
            worst_rel, worst_stat = rel, stat
    return TensorComparison(ok, worst_rel, tolerance, worst_stat, False)


def has_nonfinite(fp: dict[str, Any] | None) -> bool:
    return bool(fp) and bool(fp.get("nan") or fp.get("inf"))  # type: ignore[union-attr]
