"""Differences an op amplifies from below the tolerance: ill-conditioning, not a compiler fault.

An op whose inputs agree and whose outputs differ is normally the cause. Not
when its inputs agree only *below* the tolerance: AdamW's m / (sqrt(v) + eps)
on a parameter whose gradient is mathematically zero (nn.MultiheadAttention's
key bias: softmax ignores it) turns ~1e-9 rounding noise, which differs by
backend, into a ~1e-5 step. Two signs that an op only amplifies such noise:

- an input agrees only thanks to the absolute tolerance (its relative
  difference exceeds rtol: differences at the tolerance's floor, near zero);
- the op runs eagerly in both runs (the same op, outside every compiled
  region, in a program that has them) and its inputs differ within the
  tolerance: the same kernel fed the same values computes the same result, so
  the output difference comes from the input differences. (Fingerprints are
  whole-tensor statistics: a near-zero slice of a tensor, like the key bias
  inside in_proj_bias, is invisible to the first sign.) A trace without region
  records cannot tell eager ops from compiled ones: there only the first sign
  counts.

Such an op is remembered, its differing outputs are marked amplified, and so
are the outputs of later ops that differ only because they read amplified
values. diff/verdict/ reports the op only if an amplified value reaches a
compiled region's exit (the program's computed results) beyond the tolerance.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tracediff.diff.compare import TensorComparison, TensorDiff
from tracediff.diff.place import Place
from tracediff.trace.schema import OP, Tensor, TraceRecord

Key = tuple[int, Any]  # (tensor id, version), as in diff/verdict/dataflow.py

_WINDOW = 200_000  # amplified values remembered (like diff/verdict/dataflow.py's producer window)


@dataclass(frozen=True)
class Amplifier:
    """An op whose output differences grew from input differences below the tolerance."""

    place: Place  # trace A's op
    b: Place  # its counterpart in B
    worst: TensorDiff  # its worst differing output
    why: str  # why its inputs count as agreeing only below the tolerance
    unread: bool = False  # its amplified values are writes not fingerprinted (AdamW's foreach step)
    # Such a record that read a value changed coherently by more than rtol, within the absolute
    # tolerance (verdict/loose.py loosely_agreeing): the op of A that made that value.
    loose_maker: Place | None = None
    # What to report if its amplified difference reaches a compiled region's output: for the signs that only
    # keep a close case from failing a match (a product within its factors' reach), the verdict's divergence on
    # the spot and the loose entry it read, as they would have been without the sign; None: the amplifier.
    reported_as: tuple[Any, Any] | None = None

    def describe(self) -> str:
        return (f"{self.why}: it amplifies differences below the tolerance (ill-conditioned), "
                "not an op computing differently")


def amplifies(record_a: TraceRecord, record_b: TraceRecord, passed: Iterable[tuple[Tensor, Tensor, TensorComparison]],
              outside_regions: bool) -> str | None:
    """Why the paired op (whose inputs agree, outputs differ) may only amplify sub-tolerance
    differences of its inputs, or None when it computes differently. `passed`: its agreeing inputs;
    `outside_regions`: A runs it outside every compiled region of a program that has them."""
    passed = list(passed)
    loose = [c.rel_diff for _, _, c in passed if c.rel_diff > c.tolerance.rtol]
    if loose:
        return f"its inputs agree only within the absolute tolerance (rel diff {max(loose):.3g})"
    # The exact same op on both sides, none of B's compiled forms (a kernel, an extern `mm.out`).
    eager = (outside_regions and all(r["t"] == OP and "g" not in r for r in (record_a, record_b))
             and record_a.get("op") == record_b.get("op"))
    noisy = [c.rel_diff for ta, tb, c in passed if ta["fp"] != tb["fp"]]
    if eager and noisy:
        return (f"it runs eagerly in both runs (the same kernel) and its inputs differ only within the "
                f"tolerance (rel diff {max(noisy):.3g})")
    return None


# Matrix products (A's op, without overload) and their two factors' argument names.
_PRODUCTS = {"aten::mm": ("self", "mat2"), "aten::bmm": ("self", "mat2")}
# A difference under this many times what the tolerance allows is "barely beyond" it (the verdict's notes use it
# too). Only such outputs are judged by the bound below: a planted or real fault is far beyond the tolerance (a
# 1% error, 100 times float32's rtol).
BARELY_BEYOND = 2.0


def within_a_products_reach(record_a: TraceRecord, passed: Iterable[tuple[Tensor, Tensor, TensorComparison]],
                            worst: TensorDiff) -> str | None:
    """Why a matrix product's output difference, barely beyond the tolerance, may come from its factors'
    differences within it, or None. Such a product is not blamed unless its difference reaches a compiled
    region's output beyond the tolerance; then it is reported as it would have been on the spot (verdict/pair_rules.py),
    where the walk back may still name the op that made its factors' difference.

    At first order ||d(AB)|| <= ||dA|| ||B|| + ||A|| ||dB|| in Frobenius
    norms (per batch, then by Cauchy-Schwarz over a batch), so the output's relative difference is at most
    (rel A + rel B) ||A|| ||B|| / ||AB||, which cancellation in the product makes large (attention's q k^T
    on CPU under inductor: factors 8.3e-5 off, scores 1.35e-4 off, 1.3 times float32's rtol). The fingerprints'
    l2 are those norms; each factor's relative difference is its largest over the statistics, the sketch's
    estimate of ||dA|| / ||A|| among them."""
    factors = _PRODUCTS.get(record_a.get("op", ""))
    out = worst.comparison
    if factors is None or out.nonfinite or out.times_allowed >= BARELY_BEYOND:
        return None
    by_name = {ta["a"]: (ta["fp"], c.rel_diff) for ta, _, c in passed}
    if not all(name in by_name for name in factors):
        return None
    (fa, rel_a), (fb, rel_b) = (by_name[name] for name in factors)
    if not fa or not fb:
        return None
    out_norm = worst.a.get("l2") or 0.0
    if out_norm <= 0.0:
        return None
    reach = (rel_a + rel_b + rel_a * rel_b) * fa["l2"] * fb["l2"] / out_norm
    if out.rel_diff > reach:
        return None
    return (f"a matrix product whose output differs by {out.rel_diff:.3g}, within the {reach:.3g} that its "
            f"factors' differences within the tolerance ({rel_a:.3g} and {rel_b:.3g}) can make")


class Amplified:
    """Trace A's values whose difference is amplified sub-tolerance noise, each with its origin."""

    def __init__(self) -> None:
        self._origin: OrderedDict[Key, Amplifier] = OrderedDict()
        self.first: Amplifier | None = None
        self.values = 0  # paired values seen differing only by amplification

    @staticmethod
    def _key(t: Tensor) -> Key:
        return t["id"], t.get("v")

    def origin(self, t: Tensor) -> Amplifier | None:
        return self._origin.get(self._key(t))

    def origin_of_reads(self, record: TraceRecord) -> Amplifier | None:
        """The amplifier behind the first amplified value the record reads, if any."""
        if not self._origin:  # the common case: nothing amplified is remembered
            return None
        return next((o for o in map(self.origin, record.get("in", ())) if o is not None), None)

    def mark(self, tensors: Iterable[Tensor], origin: Amplifier, observed: bool = True) -> None:
        """`tensors` differ by `origin`'s amplification; `observed`: compared and seen differing."""
        if self.first is None:
            self.first = origin
        for t in tensors:
            key = self._key(t)
            self._origin.pop(key, None)
            self._origin[key] = origin
            self.values += observed
            if len(self._origin) > _WINDOW:
                self._origin.popitem(last=False)

    def carry(self, record: TraceRecord) -> None:
        """A record not compared (no partner in B, a view): what it makes from amplified values is amplified."""
        origin = self.origin_of_reads(record) if self._origin else None
        if origin is not None:
            self.mark(record.get("out", ()), origin, observed=False)

    def forget(self, record: TraceRecord) -> None:
        """The record's outputs were compared and agree."""
        if self._origin:
            for t in record.get("out", ()):
                self._origin.pop(self._key(t), None)

    def note(self) -> str | None:
        """For a match: what differed only by amplification (None where no value was seen differing: an
        amplifier whose outputs were never compared, a collective's in flight)."""
        if self.first is None or self.values == 0:
            return None
        p = self.first.place
        return (f"{self.values} value(s) differ only by amplified differences below the tolerance, never reaching "
                f"a compiled region's output beyond it; first: {p.op}{p.at} (#{p.index}): "
                f"{self.first.describe()}")
