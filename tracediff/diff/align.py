"""Align two traces whose op sequences differ (decompositions, fusion, renames).

Three tiers, each refining the gaps the previous one left:

1. values (rounded fingerprints) over the whole traces: records that compute
   the same value are paired whatever their names, e.g. eager `addmm` with the
   `add` ending aot_eager's `mm` + `add`, or a fused kernel with the eager op
   ending its chain; regions pair by identity. Values are paired with their
   max first, then without it (where a sum cancels, a residual add and the
   layer norm of it share the coarser key). Pairing equal values cannot
   raise a false alarm, and it is order-robust where a compiled backward runs
   many same-shape ops in another order than eager autograd;
2. inside each gap, op family + output shapes, at the same source line where
   both are known: where values differ, the op that should have computed the
   same thing (where several tie, the last of them: a kernel writes the value
   of its chain's last op); then an op and a kernel named for it (inductor names kernels
   after the aten ops they came from) at the same line with the same shapes,
   the last such kernel of the gap. Last of all, a pair by op left at the first
   op of a chain (the unpaired records after it, at its line) moves to the last
   op of the chain with its key, which is the one whose value the other run's
   single record writes;
3. inside what remains, output shapes alone: ops that stand in the same place
   with the same shapes but compute differently, which is where a wrong
   decomposition (`cos` computed as `sin`) shows. This is weak evidence, so
   pairs at different known lines are dropped and the verdict accepts such a
   pair only when both read agreeing values. Where shapes tie, the last
   records of a gap pair: a decomposition or a fused chain writes its value
   in its last op.

Every tier runs `align_sequences`, near-linear on mostly-equal inputs, so the
whole is too. Pairs are monotone in both traces. A compiled backward runs some
ops in another order than eager autograd; a value pair there that stands
between a stretch only B ran and one only A ran is tried without, and dropped
where that pairs more records by value or op. Inductor also schedules
independent forward work in another order (a rotary embedding's cos/sin after
the first layer norm): where a stretch only A ran finds its values among B's
unpaired records just before, the value pairs in the way are tried without
(at most _PIVOT_TRIALS refinements in all).
"""

from __future__ import annotations

import re
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import NamedTuple

from tracediff.diff.sequence import align_sequences
from tracediff.diff.skeleton import IN_MEMORY_RECORDS, Skeleton

Pairs = list[tuple[int, int]]
# A stretch of both traces by the pairs bounding it, (-1, -1) before the traces' start and (len_a, len_b)
# after their end: the alignment inside it depends on nothing outside.
Span = tuple[tuple[int, int], tuple[int, int]]


def _whole(a: Skeleton, b: Skeleton) -> Span:
    return (-1, -1), (len(a), len(b))


def _gaps(pairs: Pairs, span: Span) -> list[tuple[int, int, int, int]]:
    """The unpaired stretches [a0, a1) x [b0, b1) between consecutive pairs of `span`, non-empty on both sides."""
    gaps = []
    (prev_a, prev_b), end = span
    for i, j in [*pairs, end]:
        if i - prev_a > 1 and j - prev_b > 1:
            gaps.append((prev_a + 1, i, prev_b + 1, j))
        prev_a, prev_b = i, j
    return gaps


def _refine(pairs: Pairs, span: Span, keys: Callable[[int, int, int, int], tuple[Sequence, Sequence]],
            from_end: bool = False) -> Pairs:
    """Pair records inside each gap of `span` on `keys`. from_end: where keys tie, prefer the last records of
    the gap: a chain (a decomposition in B, a fusion in A) computes its value in its last op."""
    refined: Pairs = []
    for a0, a1, b0, b1 in _gaps(pairs, span):
        ka, kb = keys(a0, a1, b0, b1)
        if from_end:
            refined.extend((a1 - 1 - i, b1 - 1 - j) for i, j in align_sequences(ka[::-1], kb[::-1]))
        else:
            refined.extend((a0 + i, b0 + j) for i, j in align_sequences(ka, kb))
    return sorted(pairs + refined)


def _last_named(pairs: Pairs, a: Skeleton, b: Skeleton, span: Span) -> Pairs:
    """Inside each gap of `span`, from its end: each record of A with a named key pairs with the last
    record of B before the previous such pair that has the same key."""
    named: Pairs = []
    for a0, a1, b0, b1 in _gaps(pairs, span):
        positions: dict[int, list[int]] = {}  # key -> B's positions in the gap, ascending
        for j in range(b0, b1):
            if b.named[j]:
                positions.setdefault(b.named[j], []).append(j)
        j_end = b1
        for i in range(a1 - 1, a0 - 1, -1):
            found = positions.get(a.named[i], []) if a.named[i] else []
            k = bisect_left(found, j_end)  # B's records with the key before j_end: the last of them
            if k:
                j_end = found[k - 1]
                named.append((i, j_end))
    return sorted(pairs + named)


def _to_chain_ends(partner: array, tier: bytearray, a: Skeleton, b: Skeleton) -> None:
    """Pairs made by op moved to the end of the chain they start, on each side: where the unpaired records after
    a paired one are at its source line, the last of them with its key takes its place. The other run computed
    that line's chain in one record (a kernel fusing GELU's `0.5 * x * (1 + tanh(...))` writes the last `mul`'s
    value, not the first's), and in a long gap (the runs' values drifted apart: no pair by value near) the
    tie can leave the pair at the chain's first op, whose value is another."""
    paired_a = bytearray(_unpaired_mask(partner).translate(_PAIRED_FROM_UNPAIRED))
    paired_b = paired_in_b(partner, len(b))
    last_a, last_b = len(a) - 1, len(b) - 1
    for i in [m.start() for m in _OP_PAIRS.finditer(tier)]:
        j = partner[i]
        if (i == last_a or paired_a[i + 1]) and (j == last_b or paired_b[j + 1]):
            continue  # paired records follow on both sides: no chain (most pairs of a long trace)
        end_i, end_j = _chain_end(a, i, paired_a), _chain_end(b, j, paired_b)
        if (end_i, end_j) != (i, j):
            partner[i], tier[i], paired_a[i], paired_b[j] = -1, 0, 0, 0
            partner[end_i], tier[end_i], paired_a[end_i], paired_b[end_j] = end_j, OP_TIER, 1, 1


def paired_in_b(partner: array, len_b: int) -> bytearray:
    """Per record of B: 1 where a record of A is paired with it (`partner`), else 0."""
    paired = bytearray(len_b)
    for j in partner:
        if j >= 0:
            paired[j] = 1
    return paired


def _chain_end(skeleton: Skeleton, at: int, paired: bytearray) -> int:
    """The last record from `at` on with `at`'s key in the unbroken run of records at `at`'s source line that
    no pair takes (`paired`: 1 per paired record); `at` where its line is not known."""
    line, key, end = skeleton.source[at], skeleton.primary[at], at
    if not line:
        return at
    for k in range(at + 1, len(skeleton)):
        if paired[k] or skeleton.source[k] != line:
            break
        if skeleton.primary[k] == key:
            end = k
    return end


def _sources_differ(a: Skeleton, b: Skeleton, i: int, j: int) -> bool:
    return bool(a.source[i]) and bool(b.source[j]) and a.source[i] != b.source[j]


VALUE_TIER = 1
OP_TIER = 2
SHAPE_TIER = 3  # pairs made on output shapes alone: weak evidence, checked in the verdict


def align(a: Skeleton, b: Skeleton) -> tuple[array, bytearray]:
    """For each alignable record of `a`: the index of its partner in `b` (or -1), and the tier that paired it."""
    value_pairs = _value_pairs(a, b)
    partner, tier = _refined(value_pairs, a, b)
    # A compiled backward runs some ops in another order than eager autograd (a weight gradient's `mm`
    # after the layer norm's backward): pairing that one value, the alignment being monotone, leaves
    # every op between without a partner. Where a backward value pair stands between a stretch only B
    # ran and a stretch only A ran, try without it, and keep whichever pairs more records by op or
    # value. Not in a forward: there such stretches are fusions and decompositions, in order.
    # The same in a forward where inductor schedules independent work later than eager ran it (a
    # rotary embedding's cos/sin after the layer norm): values that A computes after a stretch it
    # alone ran were computed by B before the pairs standing in their way.
    tried: set[frozenset[tuple[int, int]]] = set()
    trials: list[tuple[frozenset[tuple[int, int]], bool]] | None = None  # of the alignment as it stands
    while len(tried) < _PIVOT_TRIALS:
        if trials is None:
            pivots = [frozenset([p]) for p in _pivots(partner, tier, len(b)) if a.backward[p[0]] or b.backward[p[1]]]
            trials = [(t, False) for t in pivots] + [(t, True) for t in _crossings(partner, value_pairs, a, b)]
        dropped, crossing = next(((t, c) for t, c in trials if t not in tried), (None, False))
        if dropped is None:
            break
        tried.add(dropped)
        # Only the stretch between the value pairs kept around the dropped ones aligns otherwise without them.
        first, last = bisect_left(value_pairs, min(dropped)), bisect_right(value_pairs, max(dropped))
        span = (value_pairs[first - 1] if first else (-1, -1),
                value_pairs[last] if last < len(value_pairs) else (len(a), len(b)))
        without = [p for p in value_pairs[first:last] if p not in dropped]
        if crossing:
            # The stretch kept from pairing pairs by value now; the dropped records must not pair again in
            # the gap they leave, where the tie that chose them would choose them again.
            excluded = {i for i, _ in dropped}
            without = _refine(without, span, _value_keys(a, b, excluded))
        trial_partner, trial_tier = _refined(without, a, b, span)
        inside = slice(span[0][0] + 1, span[1][0])
        if _strong_pairs(trial_tier) > _strong_pairs(tier[inside]):
            value_pairs = value_pairs[:first] + without + value_pairs[last:]
            partner[inside], tier[inside] = trial_partner, trial_tier
            trials = None
    _unpair_reordered(partner, tier, a, b)
    _to_chain_ends(partner, tier, a, b)
    return partner, tier


def align_in_windows(a: Skeleton, b: Skeleton, window: int | None = None) -> tuple[array, bytearray]:
    """`align`, a window of `window` records of each trace at a time (default: skeleton.py's IN_MEMORY_RECORDS),
    for traces too long to align in one piece: memory holds the keys of two windows, not of two traces.
    Traces both within one window align in one piece.

    Each window starts just after the last pair kept from the one before. Of a window's pairs, those up to the
    last one by value or op before its margin (the last quarter of the window, on a side where more follows)
    are kept: the next window aligns the margin again with what follows, where a gap cut by the window's end
    would pair otherwise. A window without such a pair (the runs computed nothing alike there) leaves its
    records unpaired but for the margin.
    """
    window = window or IN_MEMORY_RECORDS
    if len(a) <= window and len(b) <= window:
        return align(a, b) if a.spilled is None and b.spilled is None else align(a.window(0, len(a)), b.window(0, len(b)))
    partner = array("q", [-1]) * len(a)
    tier = bytearray(len(a))
    margin = window // 4
    a0 = b0 = 0
    while a0 < len(a) and b0 < len(b):
        a1, b1 = min(a0 + window, len(a)), min(b0 + window, len(b))
        part, part_tier = align(a.window(a0, a1), b.window(b0, b1))
        last = a1 == len(a) and b1 == len(b)
        # No margin at a trace's end: nothing follows there to pair with.
        keep = len(part) if last else _kept(part, part_tier, len(part) - (margin if a1 < len(a) else 0),
                                            b1 - b0 - (margin if b1 < len(b) else 0))
        for i in range(keep):
            if part[i] >= 0:
                partner[a0 + i], tier[a0 + i] = b0 + part[i], part_tier[i]
        if last:
            break
        if keep:
            a0, b0 = a0 + keep, b0 + part[keep - 1] + 1
        else:
            a0, b0 = a0 + window - margin, b0 + window - margin
    return partner, tier


def _kept(part: array, part_tier: bytearray, end_a: int, end_b: int) -> int:
    """How many of a window's records of A keep their pairs: up to the last pair by value or op before both ends."""
    for i in range(min(end_a, len(part)) - 1, -1, -1):
        if 0 <= part[i] < end_b and part_tier[i] in (VALUE_TIER, OP_TIER):
            return i + 1
    return 0


# How far from a pair (in records of each trace) its values are looked for at its line: DDP's buckets are
# reordered within one backward. Over a whole long trace a line holds thousands of values, and any value
# found a look-alike by chance (a divergence's first ops were unpaired). Traces this short are searched whole.
_REORDER_REACH = 50_000
# How far a value fused at another line is looked for: fusion reorders within a few dozen ops, and a long
# drifting stretch holds look-alikes at other lines and at unpaired records within thousands.
_FUSED_REACH = 100
# How far a value equal to B's by its value key (its rounded fingerprint) is looked for: one backward of an
# unrolled loop, a few hundred records.
_EXACT_REACH = 1_000


def _unpair_reordered(partner: array, tier: bytearray, a: Skeleton, b: Skeleton) -> None:
    """Unpair pairs made by op or shape whose values are the other trace's computed in another order, which
    monotone pairs cannot follow. The values are compared by their coarse keys (the same within 0.05%: a
    compiled run's values differ in their last digits). Such a pair is unpaired where

    - both values occur at the pair's line in the other trace near the pair (DDP lays its gradient buckets out in
      the order gradients became ready, which differs between an eager and a compiled backward: the views into a
      bucket and the copies back into `.grad` then come in another order, and pairing them by position compared
      one parameter's gradient with another's);
    - or, within _FUSED_REACH records, B's value is an unpaired record of A at the line and A's value occurs in B
      at any line: a fused kernel of B is placed at one line of the several it computes (a bf16 backward under
      inductor casts one weight's gradient alone at the pair's line, and fuses the cast of another, computed
      first in A, with the RMSNorm backward at the norm's line);
    - or, within _EXACT_REACH records, B's value is exactly (by value key) an unpaired record of A at the line,
      and not zeros: that record is B's counterpart (a compiled GRU backward over 12 steps makes the last step's
      weight gradient alone, where eager made each step's, the first step's last).

    Unpaired, they are not compared; the ops that read their values (the optimizer's) are."""
    suspects = []
    for weak in _WEAK_TIERS.finditer(tier):
        i = weak.start()
        j = partner[i]
        if not (a.has_value[i] and b.has_value[j]):
            continue
        line = a.source[i]  # 0 where no line is known (on CUDA, DDP's hooks run on autograd's own thread)
        if line != b.source[j] or a.coarse[i] == b.coarse[j] or a.coarse_shifted[i] == b.coarse_shifted[j]:
            continue  # at other lines, or the pair's own values are about the same
        suspects.append((i, j, line))
    if not suspects:
        return
    # Each trace is indexed for the values asked about only, in one pass: first B, then A for the suspects B leaves.
    places_b = _value_places(b, {(line, key) for i, _, line in suspects for key in _coarse_keys(a, i)}, any_line=True)
    found = [(i, j, line, _occurs_near(places_b.coarse, line, _coarse_keys(a, i), j),
              _occurs_near(places_b.coarse, _ANY_LINE, _coarse_keys(a, i), j, _FUSED_REACH)) for i, j, line in suspects]
    # Not for a value of zeros or non-finite ones (their two coarse keys are one), which a fault makes too.
    places_a = _value_places(a, {(line, key) for _, j, line, at_line, fused in found if at_line or fused
                                 for key in _coarse_keys(b, j)},
                             exact={(line, b.value[j]) for _, j, line, _, _ in found if b.coarse[j] != b.coarse_shifted[j]})
    unpaired_a = _unpaired_mask(partner)
    unpaired_coarse_a = _only_unpaired(places_a.coarse, unpaired_a)
    unpaired_exact_a = _only_unpaired(places_a.exact, unpaired_a)
    for i, j, line, at_line_in_b, fused_in_b in found:
        keys_b = _coarse_keys(b, j)
        if (at_line_in_b and _occurs_near(places_a.coarse, line, keys_b, i)) \
                or (fused_in_b and _occurs_near(unpaired_coarse_a, line, keys_b, i, _FUSED_REACH)) \
                or (keys_b[0] != keys_b[1] and _occurs_near(unpaired_exact_a, line, (b.value[j],), i, _EXACT_REACH)):
            partner[i], tier[i] = -1, 0


def _coarse_keys(skeleton: Skeleton, k: int) -> tuple[int, int]:
    return skeleton.coarse[k], skeleton.coarse_shifted[k]


def _only_unpaired(places: dict[tuple[int, int], list[int]], unpaired: bytes) -> dict[tuple[int, int], list[int]]:
    """`places` without the positions of paired records (`unpaired`: `_unpaired_mask`)."""
    return {place: [k for k in positions if unpaired[k]] for place, positions in places.items()}


# The tiers of pairs made by op or by shapes (a byte of `tier` each), found at C speed.
_WEAK_TIERS = re.compile(b"[%c%c]" % (OP_TIER, SHAPE_TIER))
_OP_PAIRS = re.compile(b"%c" % OP_TIER)
# `_unpaired_mask`'s bytes (0xff unpaired, 0 paired) to 1 paired, 0 unpaired, at C speed.
_PAIRED_FROM_UNPAIRED = bytes(1 if k == 0 else 0 for k in range(256))


# `_value_places`' line for values indexed whatever their line (`any_line`).
_ANY_LINE = -1


class _Places(NamedTuple):
    """(line, key) -> the positions of the records with that value at that line, ascending."""

    coarse: dict[tuple[int, int], list[int]]  # by coarse key (and at _ANY_LINE, where asked)
    exact: dict[tuple[int, int], list[int]]  # by value key (the rounded fingerprint)


def _value_places(skeleton: Skeleton, wanted: set[tuple[int, int]], any_line: bool = False,
                  exact: set[tuple[int, int]] | None = None) -> _Places:
    """The places of the `wanted` (line, coarse key)s, with `any_line` also at _ANY_LINE whatever their line, and
    of the `exact` (line, value key)s. A diverged stretch makes most of its pairs suspects, at every line: the
    positions of only the values asked for are kept (a cheap test per record), not those of every record at
    those lines."""
    places = _Places(defaultdict(list), defaultdict(list))
    exact = exact or set()
    if not wanted and not exact:
        return places
    values, exact_values = {key for _, key in wanted}, {key for _, key in exact}
    source, has_value = skeleton.source, skeleton.has_value
    for k, (coarse, shifted, value) in enumerate(zip(skeleton.coarse, skeleton.coarse_shifted, skeleton.value)):
        if (coarse in values or shifted in values or value in exact_values) and has_value[k]:
            line = source[k]
            for key in (coarse, shifted) if shifted != coarse else (coarse,):
                if key in values:
                    if (line, key) in wanted:
                        places.coarse[line, key].append(k)
                    if any_line:
                        places.coarse[_ANY_LINE, key].append(k)
            if (line, value) in exact:
                places.exact[line, value].append(k)
    return places


def _occurs_near(places: dict[tuple[int, int], list[int]], line: int, keys: tuple[int, ...], at: int,
                 reach: int | None = None) -> bool:
    """Does a value with one of `keys` occur at `line` within `reach` (default _REORDER_REACH) records of `at`?"""
    reach = _REORDER_REACH if reach is None else reach
    for key in keys:
        positions = places.get((line, key), ())
        k = bisect_left(positions, at - reach)
        if k < len(positions) and positions[k] <= at + reach:
            return True
    return False


# Value pairs tried without (each re-aligns the stretch between the value pairs kept around it), and the stretches
# of unpaired records on each side that make one a pivot.
_PIVOT_TRIALS = 16
_PIVOT_STRETCH = 3


def _pivots(partner: array, tier: bytearray, len_b: int) -> list[tuple[int, int]]:
    """Value pairs (i, j) with at least _PIVOT_STRETCH unpaired records of one trace just before them
    and of the other just after: the mark of one value computed at another place in the order."""
    unpaired = _unpaired_mask(partner)
    # A's side of the mark: the pairs just before and just after each stretch of A's unpaired records.
    beside = sorted({i for run in _UNPAIRED_STRETCH.finditer(unpaired) for i in (run.start() - 1, run.end())
                     if 0 <= i < len(partner)})
    pivots = []
    for i in beside:
        j = partner[i]
        if j < 0 or tier[i] != VALUE_TIER:
            continue
        ip = unpaired.rfind(_PAIRED, 0, i)  # the pairs before and after (-1 where none is)
        i_next = unpaired.find(_PAIRED, i + 1)
        i_next = i_next if i_next >= 0 else len(partner)
        jp = partner[ip] if ip >= 0 else -1
        j_next = partner[i_next] if i_next < len(partner) else len_b
        b_before, a_before = j - jp - 1, i - ip - 1
        a_after, b_after = i_next - i - 1, j_next - j - 1
        if (b_before >= _PIVOT_STRETCH and a_after >= _PIVOT_STRETCH) or (
                a_before >= _PIVOT_STRETCH and b_after >= _PIVOT_STRETCH):
            pivots.append((i, j))
    return pivots


# A byte per record of `_unpaired_mask`, and runs of at least _PIVOT_STRETCH unpaired records in it.
_PAIRED, _UNPAIRED = b"\x00", b"\xff"
_UNPAIRED_RECORD = re.compile(re.escape(_UNPAIRED))
_UNPAIRED_STRETCH = re.compile(re.escape(_UNPAIRED) + b"{%d,}" % _PIVOT_STRETCH)


def _unpaired_mask(partner: array) -> bytes:
    """A byte per record, 0xff where `partner` holds -1 (unpaired), 0 where it holds a record of the other
    trace: each entry's most significant byte, taken at C speed (the walks over it are hot in long traces)."""
    sign_byte = partner.itemsize - 1 if sys.byteorder == "little" else 0
    return partner.tobytes()[sign_byte::partner.itemsize]


def _strong_pairs(tier: bytearray) -> int:
    """Records paired by value or by op (not by shapes alone)."""
    return sum(1 for t in tier if t in (VALUE_TIER, OP_TIER))


def _value_pairs(a: Skeleton, b: Skeleton) -> Pairs:
    """Records computing the same value, in order: over the whole traces, then inside each gap."""
    # Records without a value get keys that match nothing (regions have their identity as value).
    # Values with their max first: where a sum cancels, a residual add and the layer norm of it
    # can share the coarser key, and the kernel writing the norm must pair with the norm.
    pairs = align_sequences([a.fine_value[i] if a.has_value[i] else ("a", i) for i in range(len(a))],
                            [b.fine_value[j] if b.has_value[j] else ("b", j) for j in range(len(b))])
    return _refine(pairs, _whole(a, b), _value_keys(a, b))


def _value_keys(a: Skeleton, b: Skeleton, excluded: frozenset[int] | set[int] = frozenset()
                ) -> Callable[[int, int, int, int], tuple[Sequence, Sequence]]:
    """Keys pairing records by rounded value inside a gap; A's `excluded` records pair with nothing."""
    def value_keys(a0: int, a1: int, b0: int, b1: int) -> tuple[Sequence, Sequence]:
        return ([a.value[i] if a.has_value[i] and i not in excluded else ("a", i) for i in range(a0, a1)],
                [b.value[j] if b.has_value[j] else ("b", j) for j in range(b0, b1)])
    return value_keys


# How far back (in records) a value computed out of order is looked for.
_CROSSING_WINDOW = 256


def _crossings(partner: array, value_pairs: Pairs, a: Skeleton, b: Skeleton) -> list[frozenset[tuple[int, int]]]:
    """Sets of value pairs that keep a stretch only one trace ran from pairing with values the other
    computed earlier: where at least _PIVOT_STRETCH records of an unpaired stretch of A find their
    values among B's unpaired records in the window before the stretch's place in B (or the same
    with A and B swapped), the value pairs crossing that pairing. At most _PIVOT_TRIALS of them."""
    partner_of_b = array("q", [-1]) * len(b)
    for i, j in enumerate(partner):
        if j >= 0:
            partner_of_b[j] = i
    swapped = [(j, i) for i, j in value_pairs]
    found = [frozenset(c) for c in islice(_crossing_pairs(partner, partner_of_b, a, b, value_pairs), _PIVOT_TRIALS)]
    found += [frozenset((i, j) for j, i in c)
              for c in islice(_crossing_pairs(partner_of_b, partner, b, a, swapped), _PIVOT_TRIALS)]
    return found


def _crossing_pairs(partner: array, partner_of_b: array, a: Skeleton, b: Skeleton,
                    value_pairs: Pairs) -> Iterator[Pairs]:
    """Each crossing (see _crossings) met walking A's unpaired stretches, as the value pairs (A index,
    B index) standing in its way."""
    # value -> B's unpaired positions holding it, ascending: those before the place in B reached (`indexed`), indexed
    # as the walk goes (the crossings are taken a few at a time, most often from the start).
    unpaired_b: dict[int, list[int]] = {}
    unpaired_in_b, indexed = _unpaired_mask(partner_of_b), 0
    for run in _UNPAIRED_STRETCH.finditer(_unpaired_mask(partner)):
        start, i = run.span()
        if not start:
            continue  # nothing paired before it: no place in B to look before
        last_j = partner[start - 1]
        # Stretches come in order, so `last_j` only grows: B's records before this window are looked for no more.
        window = max(last_j - _CROSSING_WINDOW, 0)
        for found in _UNPAIRED_RECORD.finditer(unpaired_in_b, max(indexed, window), last_j):
            j = found.start()
            if b.has_value[j]:
                unpaired_b.setdefault(b.value[j], []).append(j)
        indexed = max(indexed, last_j)
        if unpaired_in_b.count(_UNPAIRED, window, last_j) < _PIVOT_STRETCH:
            continue  # too few of B's records unpaired in the window to hold the stretch's values
        earlier = set()
        for k in range(start, i):
            positions = unpaired_b.get(a.value[k], []) if a.has_value[k] else []
            lo = bisect_left(positions, last_j - _CROSSING_WINDOW)
            if lo < len(positions) and positions[lo] < last_j:
                earlier.add(positions[lo])
        if len(earlier) >= _PIVOT_STRETCH:
            # value_pairs are monotone: those crossing are the last ones before the stretch.
            end = k = bisect_left(value_pairs, (start, -1))
            first = min(earlier)
            while k and value_pairs[k - 1][1] >= first:
                k -= 1
            if k < end:
                yield value_pairs[k:end]


def _refined(pairs: Pairs, a: Skeleton, b: Skeleton, span: Span | None = None) -> tuple[array, bytearray]:
    """`pairs` (by value) refined by op, name and shapes inside the gaps they leave: partners and tiers of A's
    records inside `span` (the whole traces by default), the first of them at index 0."""
    span = span or _whole(a, b)
    offset = span[0][0] + 1

    def primary_keys(a0: int, a1: int, b0: int, b1: int) -> tuple[Sequence, Sequence]:
        return a.primary[a0:a1], b.primary[b0:b1]

    def signature_keys(a0: int, a1: int, b0: int, b1: int) -> tuple[Sequence, Sequence]:
        return a.signature[a0:a1], b.signature[b0:b1]

    tier = bytearray(span[1][0] - offset)
    for i, _ in pairs:
        tier[i - offset] = VALUE_TIER
    # Same op family at different source lines is not "the op that should have computed the same
    # thing": a kernel ending in a layer norm's bias `add` must not pair with the residual `add` before it.
    # Where ops tie, the last ones of a gap pair: a kernel writes the value of its chain's last op
    # (a GELU backward's kernel ends in the last of its line's `add`s, not the first).
    pairs = [(i, j) for i, j in _refine(pairs, span, primary_keys, from_end=True)
             if tier[i - offset] == VALUE_TIER or not _sources_differ(a, b, i, j)]
    for i, _ in pairs:
        tier[i - offset] = tier[i - offset] or OP_TIER

    # A kernel named for A's op at its line writes that op's value; where several are (one kernel
    # per op: the pass's op and the bias `add` both come from the `addmm`), the last one does.
    pairs = _last_named(pairs, a, b, span)
    for i, _ in pairs:
        tier[i - offset] = tier[i - offset] or OP_TIER
    shape_pairs = set(_refine(pairs, span, signature_keys, from_end=True)) - set(pairs)
    # Same shapes alone is weak evidence: drop pairs whose source lines are both known and differ.
    shape_pairs = {(i, j) for i, j in shape_pairs if not _sources_differ(a, b, i, j)}
    for i, _ in shape_pairs:
        tier[i - offset] = SHAPE_TIER
    partner = array("q", [-1]) * len(tier)
    for i, j in sorted(pairs + list(shape_pairs)):
        partner[i - offset] = j
    return partner, tier
