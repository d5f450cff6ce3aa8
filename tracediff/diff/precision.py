"""The precision a value carries, and ops that cannot change values.

A float32 tensor made by widening a bfloat16 one (`.float()` after autocast)
holds bfloat16 values: two correct runs whose bfloat16 results differ by
bfloat16 rounding give float32 results that differ just as much. Judging it
at float32's tolerance blames the cast (exact by construction) for a
difference it only carried, and then every float32 op downstream of it.

So a value is judged at the tolerance of the lowest precision it was computed
from: its own dtype's tolerance, loosened to the loosest tolerance any of its
floating inputs carried. Trace A (the reference) is walked in order, so each
input's carried tolerance is known when its reader is compared. A real fault
after a cast (cos computed as sin) is still orders of magnitude outside the
bfloat16 tolerance.

`preserves_values` names the ops that only move or widen values (view,
reshape, permute, expand, slice, clone, a widening cast): never the one to
blame while an op that computes is a candidate.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from tracediff.config import Tolerance, looser
from tracediff.diff.value_keys import Key, key_of
from tracediff.op_names import base_op
from tracediff.trace.schema import REGION, Tensor, TraceRecord

# Values remembered: a bound on memory for traces of millions of ops.
_WINDOW = 200_000

# Ops whose outputs are their inputs' values, rearranged or aliased.
_MOVES = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::permute", "aten::expand",
    "aten::expand_as", "aten::slice", "aten::select", "aten::t", "aten::transpose", "aten::clone", "aten::contiguous",
    "aten::squeeze", "aten::unsqueeze", "aten::as_strided", "aten::alias", "aten::detach", "aten::flatten",
    "aten::unflatten", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::narrow", "aten::unbind",
    "aten::view_as", "aten::movedim", "aten::lift_fresh", "aten::lift_fresh_copy", "aten::copy",
    "aten::cat", "aten::stack",  # concatenations: each output element is a copy of an input's
    "aten::_to_copy", "aten::to", "aten::_to_dtype", "prims::convert_element_type",
})
# Of those, the ones that may change dtype: value-preserving only when they widen.
_CASTS = frozenset({"aten::_to_copy", "aten::to", "aten::_to_dtype", "aten::copy", "prims::convert_element_type"})

# Floating dtypes by precision (mantissa bits); a cast to one at least as precise is exact.
_MANTISSA = {"float8_e5m2": 2, "float8_e4m3fn": 3, "float8_e4m3fnuz": 3, "float8_e5m2fnuz": 2, "bfloat16": 7,
             "float16": 10, "float32": 23, "complex64": 23, "float64": 52, "complex128": 52}


def is_floating(dtype: str | None) -> bool:
    return dtype in _MANTISSA


def widens(src: str | None, dst: str | None) -> bool:
    """Is a cast from `src` to `dst` exact (both floating, `dst` at least as precise)?"""
    return is_floating(src) and is_floating(dst) and _MANTISSA[dst] >= _MANTISSA[src]  # type: ignore[index]


def only_moves(op: str | None) -> bool:
    """Does an op of this name move or alias values, whatever its dtypes (a view; not a cast)?"""
    return bool(op) and base_op(op) in _MOVES and base_op(op) not in _CASTS  # type: ignore[arg-type]


def preserves_values(record: TraceRecord) -> bool:
    """Can this op only move, alias or exactly widen its input's values?"""
    op = record.get("op")
    if only_moves(op):
        return True
    if not op or base_op(op) not in _CASTS:
        return False
    ins = [t.get("dt") for t in record.get("in", ()) if t.get("dt")]
    outs = [t.get("dt") for t in record.get("out", ()) if t.get("dt")]
    return bool(ins) and bool(outs) and all(widens(ins[-1], d) or d == ins[-1] for d in outs)


_ORDER_FREE = ("n", "sum", "l1", "l2", "max", "nan", "inf")


def rewrites_an_input(record: TraceRecord) -> bool:
    """Did this record write exactly a value it read (a kernel multiplying by a weight of ones,
    adding a bias of zeros: a fresh layer norm's affine step)? Judged on the order-free statistics
    of each output against an input of the same dtype and size; it changed no value."""
    outs = record.get("out") or ()
    ins = [t for t in record.get("in") or () if t.get("fp")]
    if not outs or not ins:
        return False

    def same(x: Tensor, y: Tensor) -> bool:
        fx, fy = x.get("fp"), y.get("fp")
        if not fx or not fy:
            return False
        # l1 first: it tells almost every two values apart, and this runs for each record of B.
        return (fx.get("l1") == fy.get("l1") and x.get("dt") == y.get("dt") and bool(fx.get("n"))
                and all(fx.get(k) == fy.get(k) for k in _ORDER_FREE))

    return all(any(same(t, i) for i in ins) for t in outs)


class CarriedPrecision:
    """For each value of trace A, the tolerance it is judged at.

    `tolerance_for(dtype, op, module, device)` gives a dtype's own tolerance
    (config.py). Call `record(r)` for every record of A in order, before its
    tensors are compared; then `of(tensor, op, module)` gives the tolerance.
    """

    def __init__(self, tolerance_for: Callable[[str, str, str | None, str], Tolerance]) -> None:
        self._tolerance_for = tolerance_for
        self._carried: OrderedDict[Key, Tolerance] = OrderedDict()

    def _own(self, t: Tensor, op: str, module: str | None) -> Tolerance:
        return self._tolerance_for(t["dt"], op, module, t.get("dev", "cpu"))

    def of(self, t: Tensor, op: str, module: str | None) -> Tolerance:
        """The tolerance `t` is judged at: what it carries, or its dtype's own."""
        own = self._own(t, op, module)
        carried = self._carried.get(key_of(t["id"], t.get("v")))
        return own if carried is None or not is_floating(t.get("dt")) else looser(own, carried)

    def record(self, record: TraceRecord) -> None:
        """File the outputs of one record of A under the loosest precision its floating inputs carry."""
        if record["t"] == REGION:
            return  # a region's outputs are values its ops made (filed there); its inputs, values made before
        floating_inputs = [t for t in record.get("in", ()) if is_floating(t.get("dt")) and not t.get("uninit")]
        if not floating_inputs:
            return
        if not self._carried:
            # Nothing carried yet (no value widened so far): an output of the dtype and device of every floating
            # input is judged at its own tolerance, the common case, which needs nothing remembered.
            kinds = {(t["dt"], t.get("dev", "cpu")) for t in floating_inputs}
            if len(kinds) == 1 and all(not is_floating(t.get("dt")) or (t["dt"], t.get("dev", "cpu")) in kinds
                                       for t in record.get("out", ())):
                return
        op = record.get("op") or record.get("name") or ""
        module = record.get("m")
        inputs = [self.of(t, op, module) for t in floating_inputs]
        for t in record.get("out", ()):
            if not is_floating(t.get("dt")):
                continue
            own = tolerance = self._own(t, op, module)
            for carried in inputs:
                tolerance = looser(tolerance, carried)
            if tolerance == own:
                continue  # the common case (inputs as precise as the output): nothing to remember
            key = key_of(t.get("id"), t.get("v"))
            self._carried.pop(key, None)
            self._carried[key] = tolerance
            if len(self._carried) > _WINDOW:
                self._carried.popitem(last=False)
