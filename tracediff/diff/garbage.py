"""Which values of trace A are uninitialized memory, seen through views.

`torch.empty` returns garbage (the recorder marks it `uninit`); a view or copy
of it (`torch.empty(n, n)[0]`, a `Parameter` slice) is the same garbage, and
comparing it between runs finds a difference that means nothing when the
program overwrites it before reading (`nn.init.*`). Garbage an op computes
with (`buf & 0xFF`) is still compared: that is a real nondeterminism.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from tracediff.diff.precision import preserves_values
from tracediff.trace.schema import Tensor, TraceRecord

_WINDOW = 200_000  # values remembered: a bound on memory


class Garbage:
    """Call `record(r)` for every record of A in order; `holds(t)` is True for garbage values."""

    def __init__(self) -> None:
        self._keys: OrderedDict[tuple[Any, Any], None] = OrderedDict()

    def holds(self, t: Tensor) -> bool:
        return bool(t.get("uninit")) or (bool(self._keys) and (t.get("id"), t.get("v")) in self._keys)

    def record(self, record: TraceRecord) -> None:
        outs = record.get("out", ())
        if any(map(self.holds, record.get("in", ()))) and preserves_values(record):
            garbage = list(outs)
        else:
            garbage = [t for t in outs if t.get("uninit")]
        for t in garbage:
            self._keys[(t.get("id"), t.get("v"))] = None
            if len(self._keys) > _WINDOW:
                self._keys.popitem(last=False)
