"""Refinements of the first divergence, applied after the walk: whether it may have started earlier
(barely beyond the tolerance, inputs that moved), and where a change it grew from was made (a value B
changed whose reader absorbed it, rule "absorbed_change" or "absorbed_by_unpaired_ops"; a change that
came in below the tolerance, rule "came_in_below_the_tolerance").
"""

from __future__ import annotations

from dataclasses import replace
from itertools import takewhile

from tracediff.diff.amplified import BARELY_BEYOND
from tracediff.diff.compare import TensorDiff
from tracediff.diff.place import Place
from tracediff.diff.precision import only_moves
from tracediff.diff.verdict.a_side import ASide
from tracediff.diff.verdict.b_side import BSideView
from tracediff.diff.verdict.comparer import (
    OTHER_QUANTITY,
    Comparer,
    input_pair,
    kind_of,
    worst_of,
)
from tracediff.diff.verdict.divergence import Divergence
from tracediff.diff.verdict.loose import LooseEntry
from tracediff.trace.schema import OP, Tensor, TraceRecord


def barely_beyond(d: Divergence) -> bool:
    """`d`'s difference is barely beyond the tolerance (`BARELY_BEYOND` times what it allows): it may be one that
    agreed within it a moment before, a sum of sub-tolerance differences crossing the line, not a change made there."""
    return (d.kind == "output" and d.worst is not None and not d.worst.comparison.nonfinite
            and d.worst.comparison.times_allowed < BARELY_BEYOND)


def unsure_if_barely_beyond(d: Divergence) -> Divergence:
    """`d`, marked `may_start_earlier` where it is placed by position alone (not an op whose own
    inputs agree and outputs differ) on a difference barely beyond the tolerance: the values that
    agreed before it did so only within the tolerance, and the difference may have been made
    earlier (inside fused kernels whose intermediates nobody saw)."""
    by_value = d.inputs_agree and d.observed is None
    if by_value or d.changed_in_b or d.may_start_earlier or not barely_beyond(d):
        return d
    assert d.worst is not None  # barely_beyond: a difference of a tensor
    comparison = d.worst.comparison
    note = (f"{d.note}; the difference is barely beyond the tolerance ({comparison.times_allowed:.2g}x what "
            "it allows): it may have grown from differences below the tolerance, made earlier")
    return replace(d, may_start_earlier=True, note=note)


def unsure_if_inputs_moved(d: Divergence, passed: list) -> Divergence:
    """`d`, pinned by value, marked `may_start_earlier` where its inputs agree only within the tolerance
    (not bitwise) and its output is barely beyond it: the op may compute exactly as A's and carry a change
    made before it, inside a fused kernel and scaled down there (GPT-2's last residual `add`, 1% off, then
    `ln_f`, which a scale leaves almost unchanged; the `lm_head` after it showed 1.2x)."""
    moved = [c.rel_diff for ta, tb, c in passed if ta.get("fp") != tb.get("fp")]
    if not moved or not barely_beyond(d) or d.worst is None:
        return d
    note = (f"{d.note}; but its inputs agree only within the tolerance (rel diff up to {max(moved):.2g}) and its "
            f"output is barely beyond it ({d.worst.comparison.times_allowed:.2g}x what it allows): the difference "
            "may come from its inputs, made earlier")
    return replace(d, may_start_earlier=True, note=note)


def absorbed_change(ra: TraceRecord, rb: TraceRecord, in_diffs: list[TensorDiff], kernel: bool, comparer: Comparer,
                     a_side: ASide, b_side: BSideView, by_name: bool) -> Divergence | None:
    """`ra`'s outputs agree though an input differs beyond the tolerance: B changed a value of A's that
    agreed (with a record only B runs) and `ra` absorbed the change (a small residual branch added to a
    large stream). Where the difference shows again later, barely, this is where it was made. With a
    kernel, inputs read in another shape count too (`in_diffs` leaves them out)."""
    if ra["t"] != OP:
        return None
    in_diffs = in_diffs or (comparer.reshaped_input_diffs(ra, rb, by_name) if kernel else [])
    if not in_diffs:
        return None
    bad = worst_of(in_diffs)
    if bad.comparison.nonfinite:
        return None
    ta, tb = input_pair(ra, rb, bad, by_name)
    made_a = a_side.agreed_through_views(ta)
    made_b = b_side.computing_producer(tb) if tb is not None else None
    if made_a is None and made_b is not None and tb is not None:
        return absorbed_by_unpaired_ops(ra, rb, bad, ta, tb, a_side, b_side)
    if made_a is not None and made_b is not None and tb is not None and made_b.place.source != made_a.source:
        # A reader decomposed into kernels of its own (one kernel per op: a layer norm's mean, rstd, ...):
        # the record of B at the line of A's op whose value it changed stands further back.
        made_b = next((m for m in reversed(b_side.walk_back(tb)) if m.only_b and not m.moves
                       and m.place.source == made_a.source), made_b)
    if made_a is None or made_b is None or not made_b.only_b or made_b.moves or made_b.place.index == rb["i"]:
        return None
    seen = Place.of(ra)
    # B's record goes on computing at the line of A's op whose value it changed (a pass's node carries
    # its source); one at the reader's own line is a piece of the reader's decomposition instead.
    if made_b.place.source != made_a.source or made_a.source == seen.source:
        return None
    note = (f"the output of {made_a.op} agrees, but B changes it before {seen.op} (#{seen.index}) reads it: B runs "
            f"{made_b.describe()}{made_b.place.at} (#{made_b.place.index}), which A does not; "
            f"{seen.op}'s output kept the change within the tolerance")
    return Divergence(kind_of(bad), made_a, made_b.place, (made_a,), bad, False, note, observed=seen, rule="absorbed_change")


def absorbed_by_unpaired_ops(ra: TraceRecord, rb: TraceRecord, bad: TensorDiff, ta: Tensor, tb: Tensor,
                                a_side: ASide, b_side: BSideView) -> Divergence | None:
    """`absorbed_change` where A made the differing input with ops no record of B is paired with (a
    compiled backward's layer-norm backward and residual `add`, one kernel of B): B's generated kernel
    that made it at the line of such an op is where the value changed. Not an op B runs (an unpaired `mm`
    of B computes A's `mm`: a difference read there is another quantity paired, a crossed gradient), nor
    a difference too large for one value computed otherwise."""
    if bad.comparison.rel_diff >= OTHER_QUANTITY:
        return None
    candidates = [c.place for c in a_side.walk_back([ta]) if not c.moves and not only_moves(c.place.op)]
    lines = {c.source for c in candidates}
    made_b = next((m for m in reversed(b_side.walk_back(tb)) if m.only_b and not m.moves and m.kernel is not None
                   and m.place.source in lines), None)
    seen = Place.of(ra)
    if made_b is None or made_b.place.index == rb["i"] or made_b.place.source == seen.source:
        return None  # at the reader's own line: a piece of the reader's decomposition
    # The ops at that line since A's last op elsewhere: one step's decomposition (a layer norm's backward
    # and the residual `add`), not the same line's ops of the forward or of another layer further back.
    at_line = tuple(reversed(list(takewhile(lambda c: c.source == made_b.place.source,
                                            reversed(candidates)))))
    if not at_line:
        return None
    note = (f"B changes the value {seen.op} (#{seen.index}) reads, made by A's {at_line[-1].op} at "
            f"{made_b.place.source}, which has no counterpart in B: B computes it with {made_b.describe()} "
            f"(#{made_b.place.index}); {seen.op}'s output kept the change within the tolerance")
    return Divergence(kind_of(bad), at_line[-1], made_b.place, at_line, bad, False, note, observed=seen, rule="absorbed_by_unpaired_ops")


def from_an_absorbed_change(first: Divergence, absorbed: Divergence | None) -> Divergence:
    """`first`, or where a difference that grew from below the tolerance was made: the value B changed
    beyond the tolerance before it (`absorbed`), whose reader kept the change within the tolerance.
    Also where `first` is an op whose inputs agree: barely beyond the tolerance, it may amplify what
    its inputs carry from that change (GPT-2's last residual `add` 1% off, normalized away by `ln_f`
    within the tolerance, shows again 1.1 times beyond it at `lm_head`). And where `first` was placed by
    walking back from where it showed, since `absorbed` showed before that: the earlier sighting is the
    first difference (a compiled backward's change absorbed by an `mm`, shown again at a weight's gradient,
    walked back along another input to the loss), unless it is another quantity paired, not one value."""
    if absorbed is None:
        return first
    unsure = absorbed.a.index < first.a.index and (first.may_start_earlier or barely_beyond(first))
    walked_past_it = (first.observed is not None and absorbed.worst is not None
                      and absorbed.worst.comparison.rel_diff < OTHER_QUANTITY)
    if not (unsure or walked_past_it):
        return first
    shown = first.observed or first.a
    note = (f"{absorbed.note}; the difference shows beyond the tolerance again at {shown.op} (#{shown.index}) "
            f"at {shown.source}")
    return replace(absorbed, worst=first.worst, note=note, observed=shown)


def from_a_loose_entry(first: Divergence, entry: LooseEntry | None) -> Divergence:
    """`first`, or, where it may have started earlier, the ops whose change came in below the tolerance
    upstream of it (`entry`): named, with `first`'s candidates kept."""
    if entry is None or not first.may_start_earlier:
        return first
    shown = first.observed or first.a
    made = entry.places[-1]
    note = (f"at {shown.op} (#{shown.index}): {first.note}; what it read carries a change that came in below the "
            f"tolerance: {entry.how}")
    candidates = tuple(dict.fromkeys((*entry.places, *first.candidates)))
    return replace(first, a=made, candidates=candidates, observed=shown, inputs_agree=False, note=note,
                   rule="came_in_below_the_tolerance")
