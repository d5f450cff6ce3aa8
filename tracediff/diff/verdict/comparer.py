"""Comparing the tensors of a pair: which pairs of tensors correspond, at what tolerance (carried
precision, calibrated noise), which disagree; and small helpers over the differences found.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, cast

from tracediff.config import Config, Tolerance
from tracediff.diff.compare import TensorComparison, TensorDiff, compare_fingerprints
from tracediff.diff.garbage import Garbage
from tracediff.diff.noise import Noise
from tracediff.diff.precision import CarriedPrecision
from tracediff.diff.verdict.dataflow import fingerprint_of
from tracediff.op_names import base_op
from tracediff.trace.schema import OP, Fingerprint, Tensor, TraceRecord, without_sketch


class Comparer:
    def __init__(self, config: Config, noise: Noise | None = None) -> None:
        self.config = config
        self.noise = noise
        self.passed_by_noise = 0  # tensors beyond the tolerance but within the calibrated noise
        self.closest = 0.0  # the largest multiple of its noise a tensor passed only by noise reached
        self._tolerances: dict[tuple[str, str, Any, str], Tolerance] = {}
        # Trace A's values judged at the precision they carry (a widened bf16 value at bf16's tolerance).
        self.precision = CarriedPrecision(self.tolerance)
        self.garbage = Garbage()  # views of torch.empty's memory: not compared

    def tolerance(self, dtype: str, op: str, module: str | None, device: str) -> Tolerance:
        key = (dtype, op, module, device)
        tolerance = self._tolerances.get(key)
        if tolerance is None:
            tolerance = self._tolerances[key] = self.config.tolerance_for(dtype, op, module, device)
        return tolerance

    def reshaped_input_diffs(self, ra: TraceRecord, rb: TraceRecord, by_name: bool) -> list[TensorDiff]:
        """The inputs `diffs` leaves out as of other shapes, where B's kernel reads A's input's
        elements in another shape: those that disagree (order-free statistics only)."""
        out: list[TensorDiff] = []
        for ta, tb in pair_tensors(ra.get("in", []), rb.get("in", []), by_name):
            if same_elements(ta, tb):
                tolerance = self.precision.of(ta, ra.get("op") or "", ra.get("m"))
                fp_a, fp_b = fingerprint_of(ta), fingerprint_of(tb)
                result = compare_fingerprints(without_sketch(fp_a), without_sketch(fp_b), tolerance)
                if not result.ok:
                    out.append(TensorDiff("input", ta["a"], ta["dt"], tuple(ta["sh"]), fp_a, fp_b, result))
        return out

    def reads_the_output_of(self, kernel: TraceRecord, ra: TraceRecord) -> bool:
        """Does `kernel` read A's op's output, as a whole, within the tolerance? Then it consumes that
        value, it does not compute it, even when it is named for the op: `triton_poi_fused_addmm_sub`
        slices an `addmm` extern call's padded output (its origins include the slice) and subtracts the
        row max. Compared by order-free statistics, zero padding aside (its element count may differ)."""
        outs = [t for t in ra.get("out", ()) if t.get("fp") and not t.get("uninit")]
        if not outs:
            return False
        ta = outs[0]
        tolerance = self.precision.of(ta, ra.get("op") or "", ra.get("m"))
        for tb in kernel.get("in", ()):
            if tb.get("fp") and not tb.get("uninit") and tb["dt"] == ta["dt"]:
                padded = cast(Fingerprint, dict(without_sketch(fingerprint_of(tb)), n=fingerprint_of(ta).get("n")))
                if compare_fingerprints(without_sketch(fingerprint_of(ta)), padded, tolerance).ok:
                    return True
        return False

    def diffs(self, side: str, xs: list, ys: list, ra: TraceRecord, by_name: bool,
              rels: list[float] | None = None, passed: list | None = None,
              kernel: bool = False) -> tuple[list[TensorDiff], int]:
        """Disagreeing tensors, and how many were compared; `rels` collects every tensor's rel diff,
        `passed` every agreeing pair with its comparison. `kernel`: one side is a generated kernel's
        buffers, compared without the order-dependent sketch (trace/schema.py's without_sketch)."""
        op = ra.get("op") or ra.get("name") or ""
        out: list[TensorDiff] = []
        compared = 0
        for ta, tb in pair_tensors(xs, ys, by_name):
            # An output that is torch.empty's memory seen through a view: garbage either way, not a result.
            if not comparable(ta, tb) or (side == "output" and self.garbage.holds(ta)):
                continue
            compared += 1
            tolerance = self.precision.of(ta, op, ra.get("m"))
            fp_a, fp_b = fingerprint_of(ta), fingerprint_of(tb)  # `comparable`: both have one
            fa, fb = (without_sketch(fp_a), without_sketch(fp_b)) if kernel else (fp_a, fp_b)
            result = self._compare(fa, fb, tolerance, ra, side, ta)
            count = _mean_count(ra) if kernel and side == "output" and not result.ok else None
            if count is not None:
                # Inductor lowers a mean to a sum and a division it may inline into the sum's readers: a
                # kernel's buffer named for the mean then holds the sum. Agreeing as the sum, it agrees.
                as_sum = self._compare(fa, _scaled(fb, 1 / count), tolerance, ra, side, ta)
                result = as_sum if as_sum.ok else result
            if rels is not None:
                rels.append(result.rel_diff)
            if not result.ok:
                out.append(TensorDiff(side, ta["a"], ta["dt"], tuple(ta["sh"]), fp_a, fp_b, result))
            elif passed is not None:
                passed.append((ta, tb, result))
        return out, compared

    def _compare(self, fa: Fingerprint, fb: Fingerprint, tolerance: Tolerance, ra: TraceRecord, side: str,
                 ta: Tensor) -> TensorComparison:
        """`fb` against `fa` at `tolerance`, and within A's calibrated noise where there is one (counted)."""
        if self.noise is None or tolerance.rtol <= 0:
            return compare_fingerprints(fa, fb, tolerance)
        noise = self.noise.get(ra["i"], side, ta["a"])
        result = compare_fingerprints(fa, fb, tolerance, noise, self.noise.factor)
        self.passed_by_noise += result.by_noise
        if result.by_noise and result.above_noise is not None and math.isfinite(result.above_noise):
            self.closest = max(self.closest, result.above_noise)
        return result


def _mean_count(ra: TraceRecord) -> int | None:
    """How many elements each output element of A's `mean` averages; None for other ops (or no shapes)."""
    if ra.get("t") != OP or base_op(ra.get("op") or "") != "aten::mean":
        return None
    ins, outs = ra.get("in") or [], ra.get("out") or []
    if not ins or not outs or "sh" not in ins[0] or "sh" not in outs[0]:
        return None
    n_in, n_out = math.prod(ins[0]["sh"]), math.prod(outs[0]["sh"])
    return n_in // n_out if n_out and n_in % n_out == 0 and n_in > n_out else None


def _scaled(fp: Fingerprint, factor: float) -> Fingerprint:
    """The fingerprint of the tensor times `factor` (> 0): its sums, norms, max and sketch scale with it."""
    scaled: dict[str, Any] = dict(fp)
    for stat in ("sum", "l1", "l2", "max"):
        if stat in scaled:
            scaled[stat] = scaled[stat] * factor
    if "sk" in scaled:
        scaled["sk"] = [x * factor for x in scaled["sk"]]
    return cast(Fingerprint, scaled)


def same_elements(ta: Tensor, tb: Tensor) -> bool:
    """Tensors of other shapes holding as many elements of one dtype: a kernel reads the buffer A's
    op reads through a view (`_unsafe_view` of an `mm`'s output)."""
    fa, fb = ta.get("fp"), tb.get("fp")
    return (fa is not None and fb is not None and not ta.get("uninit") and not tb.get("uninit")
            and ta["dt"] == tb["dt"] and ta["sh"] != tb["sh"] and fa.get("n") == fb.get("n"))


def comparable(ta: Tensor, tb: Tensor) -> bool:
    return (
        ta.get("fp") is not None and tb.get("fp") is not None and not ta.get("uninit") and not tb.get("uninit")
        and ta["dt"] == tb["dt"] and ta["sh"] == tb["sh"]
    )


def pair_tensors(xs: list[Tensor], ys: list[Tensor], by_name: bool) -> Iterator[tuple[Tensor, Tensor]]:
    """Corresponding tensors: by argument name when both ops name them alike, else by order."""
    if by_name:
        named = {t["a"]: t for t in ys}
        if all(t["a"] in named for t in xs):
            for t in xs:
                yield t, named[t["a"]]
            return
    yield from zip(xs, ys)


def worst_of(diffs: list[TensorDiff]) -> TensorDiff:
    return max(diffs, key=lambda d: (d.comparison.nonfinite,
                                     d.comparison.rel_diff if math.isfinite(d.comparison.rel_diff) else 1e308))


def kind_of(worst: TensorDiff | None) -> str:
    return "nan" if worst is not None and worst.comparison.nonfinite else "output"


# Outputs this far apart (relative) are other quantities, not one value computed otherwise.
OTHER_QUANTITY = 0.5


def far_apart(diffs: list[TensorDiff]) -> bool:
    return all(not d.comparison.nonfinite and d.comparison.rel_diff > OTHER_QUANTITY for d in diffs)


def differing(record: TraceRecord, diffs: list[TensorDiff]) -> list[Tensor]:
    args = {d.arg for d in diffs}
    return [t for t in record.get("out", ()) if t["a"] in args]


def input_pair(ra: TraceRecord, rb: TraceRecord, bad: TensorDiff, by_name: bool) -> tuple[Tensor, Tensor | None]:
    """The differing input `bad` of A's record, and B's tensor paired with it (None if none is)."""
    ta = next(t for t in ra.get("in", []) if t["a"] == bad.arg)
    return ta, next((y for x, y in pair_tensors(ra.get("in", []), rb.get("in", []), by_name) if x is ta), None)


def out_pair(ra: TraceRecord, rb: TraceRecord, worst: TensorDiff) -> Tensor | None:
    """B's output tensor compared with A's differing output `worst` (paired as the comparison pairs them)."""
    return next((y for x, y in pair_tensors(ra.get("out", []), rb.get("out", []), True) if x["a"] == worst.arg), None)
