"""Rules that place a difference by A's walk back alone: the last candidate that computes
("walked_back", "no_candidate_made_it"), the op whose agreed value only views carried
("carried_by_views"), the op that made a moved value ("shown_by_a_move"), and the amplifier whose noise
reached a compiled region's output ("amplified_noise_reaches_a_region").
"""

from __future__ import annotations

from tracediff.diff.amplified import Amplifier
from tracediff.diff.compare import TensorDiff
from tracediff.diff.place import Place
from tracediff.diff.precision import only_moves
from tracediff.diff.verdict.a_side import ASide, Produced
from tracediff.diff.verdict.b_side import Made
from tracediff.diff.verdict.comparer import (
    kind_of,
    worst_of,
)
from tracediff.diff.verdict.divergence import Divergence
from tracediff.trace.schema import KERNEL, TraceRecord


def walked_back(ra: TraceRecord, rb: TraceRecord, candidates: list[Produced], diffs: list[TensorDiff], inputs_agree: bool) -> Divergence:
    worst = worst_of(diffs)
    seen = Place.of(ra)
    if not candidates:
        note = (f"its output {worst.arg!r} differs, but no op of A without a counterpart in B made it: "
                "the difference comes from values this comparison cannot see")
        return Divergence(kind_of(worst), seen, Place.of(rb), (seen,), worst, inputs_agree, note, rule="no_candidate_made_it")
    places = tuple(c.place for c in candidates)
    # Report the last candidate that computes: a view or widening cast after it only carried the difference.
    computing = [c.place for c in candidates if not c.moves]
    reported = computing[-1] if computing else places[-1]
    if len(places) == 1:
        note = f"pinned: the only op between agreeing values and {seen.op} (#{seen.index}), where the difference shows"
    elif rb["t"] == KERNEL:
        note = (f"localized to the {len(places)} ops fused into kernel {rb.get('name')}, which writes "
                f"{seen.op} (#{seen.index}); reported: {_which(reported, places)}")
    else:
        note = (f"localized to {len(places)} ops with no counterpart in B (fused or decomposed) "
                f"feeding {seen.op} (#{seen.index}); reported: {_which(reported, places)}")
    uninit = [c.place for c in candidates if c.uninit]
    if uninit:
        note += f"; {uninit[0].op} at {uninit[0].source} returns uninitialized memory that is read before written"
    return Divergence(kind_of(worst), reported, Place.of(rb), places, worst, inputs_agree, note, observed=seen, rule="walked_back")


def _which(reported: Place, places: tuple[Place, ...]) -> str:
    if reported == places[-1]:
        return "the last of them"
    return f"the last of them that computes ({places[-1].op} after it only moves or widens values)"


def carried_by_views(ra: TraceRecord, rb: TraceRecord, views: list[Produced], diffs: list[TensorDiff], a_side: ASide,
                      made_in_b: list[Made]) -> Divergence | None:
    """Only views of A stand between a value that agreed within the tolerance and `ra`, where it
    differs beyond it, and B made it with no record of its own (`made_in_b`: B's walk back from the
    input it read). A view cannot change a value: the difference grew from below the tolerance. Name
    the op that computed the value the views carry. Not when B computed its input with records of
    its own: then B's record read another quantity (a kernel of a decomposition reads the step before
    it, not A's input), and the comparison of inputs says nothing."""
    if any(m.only_b and not m.moves for m in made_in_b):
        return None
    maker = next((m for m in (a_side.agreed_maker(v.reads) for v in views) if m is not None), None)
    if maker is None or only_moves(maker.op):
        return None
    seen = Place.of(ra)
    note = (f"only views of A ({', '.join(v.place.op for v in views)}) stand between {maker.op} (#{maker.index}), "
            f"whose output agreed within the tolerance, and {seen.op} (#{seen.index}), where the difference "
            "shows; a view cannot change a value: it grew from a difference below the tolerance, made there "
            "or before it")
    worst = worst_of(diffs)
    return Divergence(kind_of(worst), maker, Place.of(rb), (maker, *(v.place for v in views)), worst, False, note,
                      observed=seen, may_start_earlier=True, rule="carried_by_views")


def shown_by_a_move(ra: TraceRecord, rb: TraceRecord, passed: list, diffs: list[TensorDiff], a_side: ASide) -> Divergence:
    """A value-preserving op's outputs differ while its inputs agree within the tolerance over the whole
    tensor: the difference was made before it. Name the ops of A that made its inputs (not pinned)."""
    seen, worst = Place.of(ra), worst_of(diffs)
    makers = tuple(dict.fromkeys(m for m in (a_side.maker_behind_views(ta) for ta, _, _ in passed) if m is not None))
    note = (f"{seen.op} only moves values: its input already held this difference, within the tolerance over "
            f"the whole tensor")
    if not makers:
        return Divergence(kind_of(worst), seen, Place.of(rb), (seen,), worst, False,
                          f"{note}; no recorded op of A made that input", may_start_earlier=True, rule="shown_by_a_move")
    return Divergence(kind_of(worst), makers[-1], None, makers, worst, False, f"{note}; named: the op that made it",
                      observed=seen, may_start_earlier=True, rule="shown_by_a_move")


def amplified_reached(ra: TraceRecord, rb: TraceRecord, origin: Amplifier, diffs: list[TensorDiff]) -> Divergence:
    """Amplified sub-tolerance noise reaches a compiled region's outputs beyond the tolerance: blame the amplifier."""
    seen = Place.of(ra)
    note = (f"{origin.describe()}; the amplified difference reaches {seen.op} (#{seen.index}), "
            f"a compiled region's output, beyond the tolerance ({worst_of(diffs).comparison.describe()})")
    return Divergence(kind_of(origin.worst), origin.place, origin.b, (origin.place,), origin.worst, True, note,
                      observed=seen, rule="amplified_noise_reaches_a_region")
