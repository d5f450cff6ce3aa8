"""Which values a trace computed anywhere: telling a crossed pair from a divergence.

A compiled backward runs same-shaped branches (the gradients of k and v) in
another order than eager autograd, so alignment on op and shapes can pair A's
k-branch op with B's v-branch op. Their inputs then "differ" although B
computed A's very inputs elsewhere. Looking each of A's inputs up among all of
B's values, at the tolerance they are judged by, tells the two apart.

The index is built on first use (only a pair that would be reported needs it)
from one more read of the trace, and holds four numbers and the sketch per
output tensor. Values are looked up by element count, not shape (A may read
through a view what B computed in another shape); the sketch tells apart values
whose order-free statistics agree but whose elements moved.
Rounded-fingerprint keys are not enough: a gradient's `sum` is cancellation
noise near zero and rounds differently in each run; `l1` does not cancel.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from tracediff.config import Tolerance
from tracediff.diff.compare import compare_fingerprints
from tracediff.trace.reader import Trace
from tracediff.trace.schema import Fingerprint, Tensor

# Buckets 2% wide in log(l1): a value within any tolerance this tool uses lies in its bucket or a neighbour.
_BUCKETS_PER_DECADE = 115
# Beyond this many tensors the index would cost too much memory: no lookups, pairs are judged as before.
_MAX_TENSORS = 2_000_000

_Key = tuple[str, int, int]  # dtype, element count (a view of the value has another shape), l1 bucket


def distinctive(t: Tensor) -> bool:
    """Could this value plausibly occur only once? Not zeros, NaN/Inf, nor a constant magnitude (ones, a fill)."""
    fp = t.get("fp")
    if not fp or t.get("uninit") or not fp.get("n") or fp["nan"] or fp["inf"]:
        return False
    return 0 < fp["l1"] < 0.999 * fp["n"] * fp["max"]


def _bucket(l1: float) -> int:
    return math.floor(math.log10(l1) * _BUCKETS_PER_DECADE)


class ComputedValues:
    """Lookups of values among every output a trace recorded."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._index: dict[_Key, list[Fingerprint]] | None = None
        self._usable = True

    def _build(self) -> None:
        index: dict[_Key, list[Fingerprint]] = defaultdict(list)
        count = 0
        for record in Trace(self._path):
            for t in record.get("out") or ():
                fp = t.get("fp")
                if fp is None or not distinctive(t):
                    continue
                kept: Fingerprint = {"sum": fp["sum"], "l1": fp["l1"], "l2": fp["l2"], "max": fp["max"], "nan": 0, "inf": 0,
                                     "n": fp["n"]}
                if "sk" in fp:
                    kept["sk"] = fp["sk"]
                index[(t["dt"], int(fp["n"]), _bucket(fp["l1"]))].append(kept)
                count += 1
                if count > _MAX_TENSORS:
                    self._usable = False
                    return
        self._index = dict(index)

    def hold_all(self, tensors: list[Tensor], tolerance_of: Callable[[Tensor], Tolerance]) -> bool:
        """Did the trace compute every one of these (distinctive) values, within each one's tolerance?"""
        if not tensors or not all(distinctive(t) for t in tensors):
            return False
        if self._index is None and self._usable:
            self._build()
        if self._index is None:
            return False
        return all(self._holds(t, tolerance_of(t)) for t in tensors)

    def _holds(self, t: Tensor, tolerance: Tolerance) -> bool:
        fp = t["fp"]
        assert self._index is not None and fp is not None  # `hold_all` looks up distinctive values only
        bucket = _bucket(fp["l1"])
        for b in (bucket - 1, bucket, bucket + 1):
            for other in self._index.get((t["dt"], int(fp["n"]), b), ()):
                if compare_fingerprints(fp, other, tolerance).ok:
                    return True
        return False
