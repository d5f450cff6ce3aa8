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
from array import array
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
    """Lookups of values among every output a trace recorded.

    The index packs each value's statistics into one array of floats (sum, l1, l2, max, n, the sketch's
    length, the sketch), found by offset: a dict per fingerprint took about 400 bytes, 0.8 GB for the
    2,000,000 values a long trace fills it with before it gives up."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._index: dict[_Key, array] | None = None  # key -> offsets into _values
        self._values = array("d")
        self._usable = True

    def _build(self) -> None:
        index: dict[_Key, array] = {}
        values = self._values
        count = 0
        for record in Trace(self._path):
            for t in record.get("out") or ():
                fp = t.get("fp")
                if fp is None or not distinctive(t):
                    continue
                key = (t["dt"], int(fp["n"]), _bucket(fp["l1"]))
                offsets = index.get(key)
                if offsets is None:
                    offsets = index[key] = array("q")
                offsets.append(len(values))
                sketch = fp.get("sk") or ()
                values.extend((fp["sum"], fp["l1"], fp["l2"], fp["max"], fp["n"], len(sketch)))
                values.extend(sketch)
                count += 1
                if count > _MAX_TENSORS:
                    self._usable = False
                    self._values = array("d")
                    return
        self._index = index

    def _fingerprint_at(self, offset: int) -> Fingerprint:
        total, l1, l2, largest, n, width = self._values[offset:offset + 6]
        kept: Fingerprint = {"sum": total, "l1": l1, "l2": l2, "max": largest, "nan": 0, "inf": 0, "n": int(n)}
        if width:
            kept["sk"] = list(self._values[offset + 6:offset + 6 + int(width)])
        return kept

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
            for offset in self._index.get((t["dt"], int(fp["n"]), b), ()):
                if compare_fingerprints(fp, self._fingerprint_at(offset), tolerance).ok:
                    return True
        return False
