"""Changes that came in below the tolerance: where a value agreed only within the absolute tolerance while
far from zero, or moved far more than its inputs, and which later values carry that change. The
refinement `from_a_loose_entry` (refinements.py) names where such a change came in.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from tracediff.diff.compare import TensorComparison
from tracediff.diff.place import Place
from tracediff.diff.precision import only_moves
from tracediff.diff.verdict.a_side import ASide
from tracediff.diff.verdict.dataflow import (
    VIEW_CHAIN_LIMIT,
    Key,
    filed_keys,
    fingerprint_of,
    put_bounded,
    resolve,
    value_ref,
)
from tracediff.trace.schema import Tensor, TraceRecord


@dataclass(frozen=True)
class LooseEntry:
    """Where a change below the tolerance came in: a value A made with ops no record of B pairs with
    (`places`, computing ops, oldest first), which an op (`read_at`) read agreeing only within the absolute
    tolerance, changed by more than rtol relative (`rel_diff`); or a paired op (`places` and `read_at`
    both it) whose output moved far more than its inputs, still within the tolerance."""

    places: tuple[Place, ...]
    read_at: Place
    rel_diff: float
    how: str  # says which of the two, for the report


class LooseEntries:
    """Which of A's agreeing values carry a change that came in below the tolerance, and where it came in.
    A difference that grows from there (a loss's gradient 0.5% off, its elements of about 1e-3 moving by
    less than the absolute tolerance, 1e-5, carried through a backward until an `mm` shows it barely
    beyond the tolerance) was made there, not at the op where it first exceeds the tolerance."""

    def __init__(self) -> None:
        self.carried: OrderedDict[Key, LooseEntry] = OrderedDict()

    def read_by(self, ra: TraceRecord, passed: list[tuple[Tensor, Tensor, TensorComparison]],
                a_side: ASide) -> LooseEntry | None:
        """The earliest entry that `ra`'s inputs carry (compared or not: a kernel's buffers need not be A's
        op's arguments), or that one of its agreeing inputs (`passed`) starts."""
        # `_of` finds only entries of `carried`: while it is empty (most of a healthy run), none.
        found = [entry for t in ra.get("in", ()) if (entry := self._of(t, a_side)) is not None] if self.carried else []
        for ta, _tb, comparison in passed:
            if not found and far_from_zero_and_loose(ta, comparison):
                made = a_side.walk_back([ta])
                if any(c.unread for c in made):
                    continue  # made by an update whose writes were not read (AdamW's foreach step): judged apart
                places = tuple(c.place for c in made if not c.moves and not only_moves(c.place.op))
                if places:
                    how = (f"{Place.of(ra).op} (#{ra['i']}) read the value of {places[-1].op}{places[-1].at}, "
                           f"which no record of B pairs with, {comparison.rel_diff:.2g} off relative (beyond rtol, "
                           "small values within atol)")
                    found.append(LooseEntry(places, Place.of(ra), comparison.rel_diff, how))
        return min(found, key=lambda e: e.read_at.index, default=None)

    @staticmethod
    def started_by(ra: TraceRecord, passed: list[tuple[Tensor, Tensor, TensorComparison]],
                   out_passed: list[tuple[Tensor, Tensor, TensorComparison]]) -> LooseEntry | None:
        """A new entry where `ra` (whose inputs carry none) agreed, but its outputs moved far more than its
        agreeing inputs: a change of at least 1/_FAR_BELOW of rtol from inputs that moved _FAR_BELOW times
        less (a layer norm's backward 7e-5 off, rtol 1e-3, from inputs 4e-8 off: rounding)."""
        moved = max((c.rel_diff for _, _, c in out_passed), default=0.0)
        inputs = max((c.rel_diff for _, _, c in passed), default=0.0)
        if not out_passed or moved * _FAR_BELOW <= out_passed[0][2].tolerance.rtol or moved <= _FAR_BELOW * inputs:
            return None
        place = Place.of(ra)
        how = (f"{place.op} (#{place.index}) at {place.source} agreed, but its output moved {moved:.2g} relative "
               f"from inputs that moved {inputs:.2g}: a change below the tolerance, not rounding, made there")
        return LooseEntry((place,), place, moved, how)

    def carry(self, ra: TraceRecord, moved: Iterable[Tensor], entry: LooseEntry | None) -> None:
        """`ra`'s outputs that moved at all (`moved`, A's tensors) carry what its inputs carried."""
        if entry is None:
            return
        for ta in moved:
            for key in filed_keys(ra, ta):
                put_bounded(self.carried, key, entry)

    def _of(self, t: Tensor, a_side: ASide) -> LooseEntry | None:
        """The entry `t`'s value carries, also through the unpaired views and ops of A that made it."""
        refs, seen = [value_ref(t)], 0
        while refs and seen < VIEW_CHAIN_LIMIT:
            ref = refs.pop()
            seen += 1
            key = resolve(ref, self.carried, a_side.unknown_producers)
            if key in self.carried:
                return self.carried[key]
            producer = a_side.unknown_producers.get(key)
            if producer is not None:
                refs.extend(producer.reads)
        return None


# A change this many times below rtol, from inputs that moved this many times less, is no rounding.
_FAR_BELOW = 30.0


def moved(passed: list[tuple[Tensor, Tensor, TensorComparison]]) -> list[Tensor]:
    """A's tensors of agreeing pairs that are not equal to B's."""
    return [ta for ta, _tb, comparison in passed if comparison.rel_diff > 0]


def far_from_zero_and_loose(ta: Tensor, c: TensorComparison) -> bool:
    """A value that agreed only within the absolute tolerance while far from zero (see `loosely_agreeing`)."""
    return (c.rel_diff > c.tolerance.rtol and c.tolerance.atol > 0
            and abs(fingerprint_of(ta).get("max", 0.0)) > _FAR_FROM_ZERO * c.tolerance.atol)


# A value this many times its absolute tolerance (max |x|) is no rounding noise near zero.
_FAR_FROM_ZERO = 10.0


def loosely_agreeing(passed: list[tuple[Tensor, Tensor, TensorComparison]]) -> list[Tensor]:
    """B's tensors (of agreeing pairs) that agreed only within the absolute tolerance while far from zero:
    a coherent relative change larger than rtol (a 1% change of a variance whose values are ~5e-4, with
    atol 1e-5), not noise. They agree by the tolerance's rule; a walk back may still pass through them."""
    return [tb for ta, tb, c in passed if c.rel_diff > c.tolerance.rtol and c.tolerance.atol > 0
            and abs(fingerprint_of(ta).get("max", 0.0)) > _FAR_FROM_ZERO * c.tolerance.atol]
