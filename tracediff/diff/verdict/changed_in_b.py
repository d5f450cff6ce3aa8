"""Rules that name a record only B runs as the place a value changed: a compiler pass's op, or a kernel
going on computing at an op's line after the record paired with that op agreed. Each returns a
`Divergence` with its rule's name, or None where its case does not hold.
"""

from __future__ import annotations

import re
from dataclasses import replace

from tracediff.diff.compare import TensorDiff
from tracediff.diff.place import Place
from tracediff.diff.precision import only_moves
from tracediff.diff.verdict.a_side import ASide, Produced, places_of
from tracediff.diff.verdict.b_side import BSideView, Made
from tracediff.diff.verdict.comparer import (
    Comparer,
    input_pair,
    kind_of,
    worst_of,
)
from tracediff.diff.verdict.dataflow import fingerprint_of
from tracediff.diff.verdict.divergence import Divergence
from tracediff.diff.verdict.loose import loosely_agreeing
from tracediff.trace.schema import Tensor, TraceRecord


def changed_in_between(ra: TraceRecord, rb: TraceRecord, in_diffs: list[TensorDiff], a_side: ASide, b_side: BSideView,
                        by_name: bool) -> Divergence:
    """An input differs although no unpaired op of A produced it.

    Either the value agreed when A's producer made it and B changed it before
    this op read it (an op only B runs, e.g. one a compiler pass inserted), or
    it is a program input that differs from the start.
    """
    bad = worst_of(in_diffs)  # the value B changed is the one to show
    ta, tb = input_pair(ra, rb, bad, by_name)
    made_a = a_side.maker_behind_views(ta)
    made_b = b_side.computing_producer(tb) if tb is not None else None
    seen = Place.of(ra)
    if made_a is None:
        note = (f"its input {bad.arg!r} already differs and no recorded op of A produced it: "
                "a program input, parameter or buffer differs between the runs")
        return Divergence(kind_of(bad), seen, Place.of(rb), (seen,), bad, False, note, program_input=True, rule="program_input")
    if made_b is not None and made_b.place.index != rb["i"]:
        note = (f"the output of {made_a.op} agrees, but B changes it before {seen.op} (#{seen.index}) reads it: "
                f"B runs {made_b.describe()}{made_b.place.at} (#{made_b.place.index}), which A does not")
    else:
        note = f"the output of {made_a.op} agrees, but differs by the time {seen.op} (#{seen.index}) reads it"
    return Divergence(kind_of(bad), made_a, made_b.place if made_b else Place.of(rb), (made_a,), bad, False, note,
                      observed=seen, rule="changed_in_between")


def op_read_at_its_line(made: Made, a_side: ASide, b_side: BSideView, line: str | None = None) -> Place | None:
    """The op of A at B's record `made`'s own line (or at `line`) whose agreed value `made` read (the `mm` a
    pass's `mul` scales, not the `sum` of that `mm` computed at the same line after it)."""
    line = line or made.place.source
    read = (a_side.agreed_place(i) for i in b_side.agreed_values_read(made))
    return next((p for p in read if p is not None and p.source == line and not only_moves(p.op)), None)


def made_in_b_behind_views(ra: TraceRecord, rb: TraceRecord, in_diffs: list[TensorDiff], views: list[Produced], a_side: ASide,
                            made_in_b: list[Made], b_side: BSideView) -> Divergence | None:
    """An input differs and only views of A stand between it and values that agree.

    A view cannot change a value, so B changed it, with records only B ran (a
    compiler pass's op or a kernel after the last paired one: GPT-2's `ln_f`
    output scaled by a kernel of its own, read by `lm_head` through views).
    Name the last of them that computes, at A's op of the same line.
    `made_in_b`: B's walk back from the input its record read.
    """
    bad = worst_of(in_diffs)
    computing = [m for m in made_in_b if not m.moves]
    if not computing:
        return None
    changed = computing[-1]
    a = (op_read_at_its_line(changed, a_side, b_side) or a_side.counterpart(changed.op, changed.place.source)
         or a_side.computing_at(changed.place.source))
    if a is None and changed.place.source is not None and changed.place.source == ra.get("src"):
        # B changed it at `ra`'s own line: inside `ra`'s decomposition (a kernel of SiLU's `1 + exp(-x)`,
        # read by the kernel paired with A's `silu`), so `ra` itself computes differently.
        a = Place.of(ra)
    if a is None:
        return None
    seen = Place.of(ra)
    note = (f"only views of A ({', '.join(v.place.op for v in views)}) stand between values that agree and "
            f"{seen.op} (#{seen.index}), and a view cannot change a value: B changes it with "
            f"{changed.describe()}{changed.place.at} (#{changed.place.index}), which A does not run")
    others = fused_elsewhere(changed, a, seen, a_side, b_side)
    if others:
        note += f"; it fuses ops of other lines too ({', '.join(p.source or '?' for p in others)}): candidates"
    return Divergence(kind_of(bad), a, changed.place, (a, *others), bad, False, note, observed=seen, rule="made_in_b_behind_views")


def fused_elsewhere(kernel: Made, named: Place, seen: Place, a_side: ASide, b_side: BSideView) -> tuple[Place, ...]:
    """A's ops at the other source lines a kernel of B fuses (an input gradient's `mm` with a pass's `mul` at
    its line, fused into the attention backward's kernel, named at the attention's line): the change may be
    in any of them. The op whose agreed value the kernel read at that line, else A's latest computing there."""
    if kernel.kernel is None:
        return ()
    found: list[Place] = []
    for line in sorted(kernel.fused_lines - {named.source}):
        # Else the latest before the op where the difference shows: the one whose value reached it (backward
        # runs the layers in reverse, so an earlier record at that line is another layer's).
        place = (op_read_at_its_line(kernel, a_side, b_side, line)
                 or a_side.agreed_computing_at(line, before=seen.index))
        if place is not None and place != named and place not in found:
            found.append(place)
    return tuple(found)


def changed_after_its_pair(ra: TraceRecord, rb: TraceRecord, tb: Tensor | None, candidates: tuple[Place, ...],
                            diffs: list[TensorDiff], a_side: ASide, b_side: BSideView,
                            comparer: Comparer | None = None, through_loose: bool = False,
                            through_updates: bool = False) -> Divergence | None:
    """A's walk back found candidates, but B made the differing value through a record only B runs
    at the line of an op of A whose output agreed: B went on computing that op's value after the
    record paired with it. A decomposition can hold the op's value before its last step (a fresh
    layer norm's `x_hat * weight`, weight 1 and bias 0; an `mm` before a zero bias), so the pair
    agreed while a change made after it (a pass's op, a wrong epilogue) reached `ra`. Name that op.
    Also where B computed a candidate's value as A did and then changed it with an op A never runs at
    that line (`comparer` given): the aligner left that value unpaired, the compiled backward having
    computed it in another order (a layer's input gradient before its bias's)."""
    if tb is None:
        return None
    # The lines of candidates that compute: a view computes nothing a kernel at its line could stand for
    # (Llama's `o_proj` output reshaped at its line, then a pass's `mul` there).
    # Not when `tb` is an input the paired op read loosely (through_loose): the records behind it ran before
    # B's partner of that op, which computes it; they are no piece of it (a pass's `mul` of `variance + eps`,
    # then `rsqrt`, all at one line).
    lines = set() if through_loose else {c.source for c in candidates if not only_moves(c.op)}
    made_in_b = b_side.walk_back(tb, through_loose, through_updates)
    if through_updates:
        # Behind an update, B's generated kernels recompute and reorder a whole backward (a layer norm's
        # backward reading B's recomputation of its forward value): only an op B runs that A does not
        # (a compiler pass's op) is taken for a change there.
        made_in_b = [m for m in made_in_b if m.kernel is None]
    # At a line where B's records compute anew a value that agreed (not rewrite one they read: a weight of
    # ones), they recompute A's op there (a forward `gelu` inside a compiled backward): no change there.
    recomputed = {m.place.source for m in made_in_b if not m.moves and b_side.recomputes(m)}
    for made in made_in_b:  # oldest first: the first change on B's way to `ra`
        if made.moves:
            continue
        # A kernel fusing an op at a candidate's line computes that candidate too (a head's bias-gradient
        # `sum` fused with the `tanh` backward of the layer before it, the kernel named at the `tanh`'s line).
        if made.place.source in lines or made.fused_lines & lines:
            # Did B change a candidate's value there? A record paired by shapes alone is looked at too: such
            # a pair is no evidence that it computes A's op.
            redone = candidate_value_read(made, candidates, ra["i"], a_side, comparer) if comparer else None
            if redone is not None:
                seen = Place.of(ra)
                note = (f"B computes the value of {redone.op} (#{redone.index}) as A does, then changes it: it runs "
                        f"{made.describe()} (#{made.place.index}) at its line, an op A does not run there, reading "
                        f"that value, on its way to {seen.op} (#{seen.index}), where the difference shows")
                return Divergence(kind_of(worst_of(diffs)), redone, made.place, (redone,), worst_of(diffs), False, note,
                                  observed=seen, changed_in_b=True, rule="candidate_changed_at_its_line")
            continue
        if not made.only_b:
            continue
        # The op of A whose agreed value it read, at its line (the `mm` before a pass's `mul`), else the
        # latest op of A at its line whose output agreed. Not where B recomputes at that line: there reading
        # the value of one op (`addmm`) is a step of recomputing the next (`gelu(fc1(x))`, one line).
        read_there = None if made.place.source in recomputed else op_read_at_its_line(made, a_side, b_side)
        a = read_there or a_side.agreed_computing_at(made.place.source)
        if a is None or a.index > first_computing_floats(candidates, a_side).index:
            continue
        # After a recomputation, a record reading the recomputed value and writing another changes it.
        changes_recomputed = not b_side.recomputes(made) and b_side.read_a_recomputed_value_of(made, a.index)
        if made.place.source in recomputed and not changes_recomputed:
            continue
        seen = Place.of(ra)
        note = (f"{a.op} (#{a.index}) agrees with the record of B paired with it, but B goes on computing at its "
                f"line: it runs {made.describe()} (#{made.place.index}), which A does not, on its way to "
                f"{seen.op} (#{seen.index}), where the difference shows")
        worst = worst_of(diffs)
        read_its_value = b_side.read_the_value_of(made, a.index)
        if read_its_value or changes_recomputed:
            # It read that op's very value (agreed) and wrote another at its line: B changed it there. Not
            # a piece of the op's decomposition or recomputation: those read the op's inputs.
            note += (f"; it read the value of {a.op} that agreed: B changed it there" if read_its_value
                     else f"; it read B's recomputation of {a.op}'s value, which agreed: B changed it there")
            # What it wrote is not what it read: the change is made there, however small it still is where it shows.
            changed = not set(made.wrote) & set(made.read_contents)
            return Divergence(kind_of(worst), a, made.place, (a,), worst, False, note, observed=seen, changed_in_b=changed, rule="changed_after_its_pair")
        note += "; candidates: this op, then A's ops without a counterpart after it"
        return Divergence(kind_of(worst), a, made.place, (a, *candidates), worst, False, note,
                          observed=seen, rule="went_on_after_its_pair")
    return None


def first_computing_floats(candidates: tuple[Place, ...], a_side: ASide) -> Place:
    """The oldest candidate that makes floating values: the walk back also reaches the integer indices a
    gather reads (an embedding's position ids, computed in the forward), which no floating change came
    through, and an op of A changed after them is no less upstream of the difference."""
    for place in candidates:
        outputs = a_side.outputs_of(place.index)
        if not outputs or any(not _INTEGRAL.match(t.get("dt", "")) for t in outputs):
            return place
    return candidates[0]


def candidate_value_read(made: Made, candidates: tuple[Place, ...], seen: int, a_side: ASide,
                          comparer: Comparer) -> Place | None:
    """The candidate of A before the record `seen` (where the difference shows), at B's record `made`'s
    line, whose output `made` read, within the tolerance, where `made` computes an op A never runs at
    that line (a pass's `mul`): B computed that value as A did and changed it there. Not a record of an
    op A runs at that line: that one computes A's next op (a wrong `tanh` reading a right `addmm`), and
    that op is the one to blame. Not the op at `seen` itself: B's records at its line are pieces of its
    decomposition, and one may read a value equal to its output (a layer norm's weight of ones). Nor, for a
    record of the backward, an op of the forward: the backward reads the forward's saved activations (the
    output of `ln_f` read by its backward's kernel), it does not compute them again to change them."""
    if not made.foreign:
        return None
    for place in candidates:
        if place.index >= seen or place.source != made.place.source or only_moves(place.op):
            continue
        produced = a_side.unpaired(place.index)
        if produced is None or (made.backward and not produced.backward):
            continue
        for t in produced.output_tensors():
            if not fingerprint_of(t).get("l1"):
                continue  # all zeros: any zeros read would match
            tolerance = comparer.tolerance(t["dt"], place.op, place.module, t.get("dev", "cpu"))
            if made.read(t, tolerance):
                return place
    return None


# Dtypes of indices and masks: no floating difference comes through them.
_INTEGRAL = re.compile(r"(u?int\d*|bool)$")


def changed_behind_unread_writes(ra: TraceRecord, rb: TraceRecord, tb: Tensor | None, candidates: list[Produced],
                                  diffs: list[TensorDiff], a_side: ASide, b_side: BSideView) -> Divergence | None:
    """A's walk back reached a record whose writes were not fingerprinted (AdamW's foreach step on CUDA
    writes the weights in place): the values it read agreed, maybe only within the absolute tolerance (small
    gradients, 1% off), and its update (m / sqrt(v)) made that difference visible. Where B changed such a
    value by a record only B runs, reading A's agreed value at its line, name that record's op."""
    if tb is None or not any(c.unread for c in candidates):
        return None
    found = changed_after_its_pair(ra, rb, tb, places_of(candidates), diffs, a_side, b_side, through_loose=True,
                                    through_updates=True)
    if found is None or not found.changed_in_b:
        return None
    return replace(found, rule="changed_behind_unread_writes",
                   note=f"{found.note}; the values in between agreed only within the absolute tolerance "
                        f"(small values, changed by more than rtol relative) until an update whose writes "
                        f"are not fingerprinted ({candidates[-1].place.op}) made it visible")


def changed_below_the_absolute_tolerance(ra: TraceRecord, rb: TraceRecord, passed: list, out_diffs: list[TensorDiff],
                                          a_side: ASide, b_side: BSideView) -> Divergence | None:
    """An op whose inputs agree only within the absolute tolerance and whose outputs differ (taken for
    amplified noise): where B made such an input, far from zero, by changing a value that agreed at the
    line of an op of A (a pass's `mul` after a variance's `mean`, with one kernel per op), name that op."""
    for tb in loosely_agreeing(passed):
        found = changed_after_its_pair(ra, rb, tb, (Place.of(ra),), out_diffs, a_side, b_side, through_loose=True)
        if found is not None and found.changed_in_b:
            return replace(found, rule="changed_below_the_absolute_tolerance",
                           note=f"{found.note}; the values in between agreed only within the absolute "
                                f"tolerance (small values, changed by more than rtol relative)")
    return None


def made_only_in_b(ra: TraceRecord, rb: TraceRecord, diffs: list[TensorDiff], a_side: ASide, b_side: BSideView) -> Divergence | None:
    """A compiled region's output differs and every op of A behind it agrees with its partner in B.

    Then B changed the value after its last paired op: ops only B ran between
    that op and the region's exit (a compiler pass's op on the graph's last
    value, a kernel writing it). Name the last of them that computes, at its
    own source line, and A's op that corresponds to it: the same op at the
    same line, else A's op whose output B changed.
    """
    worst = worst_of(diffs)
    ta = next(t for t in ra.get("out", ()) if t["a"] == worst.arg)
    tb = next((t for t in rb.get("out", ()) if t["a"] == worst.arg), None)
    made = b_side.walk_back(tb) if tb is not None else []
    if not made:
        return None
    computing = [m for m in made if not m.moves]
    changed = (computing or made)[-1]
    made_a = a_side.agreed_value(ta)
    a = a_side.counterpart(changed.op, changed.place.source) or made_a
    seen = Place.of(ra)
    if a is None:
        return None
    what = f"the output of {made_a.op} (#{made_a.index}) agrees" if made_a is not None else "every op of A agrees"
    note = (f"{what}, but B changes it before {seen.op} (#{seen.index}) returns it: B runs "
            f"{changed.describe()} at {changed.place.source} (#{changed.place.index}), which A does not")
    if len(computing) > 1:
        note += f" ({len(computing)} such ops in B; named: the last of them)"
    return Divergence(kind_of(worst), a, changed.place, (a,), worst, False, note, observed=seen, rule="made_only_in_b")
