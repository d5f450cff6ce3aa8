"""Pass 2 of a diff: walk trace A in order and find the cause of divergence.

Trace A is the reference. Each record paired with a record of B (align.py)
is compared: its outputs, and its inputs as B saw them. The first paired
record whose outputs disagree is the first *observation* of divergence:

- if its inputs agree, the op itself is the cause: pinned, one candidate;
- if an input already disagrees, the cause lies upstream among records that
  had no partner in B (fused into a kernel, decomposed differently): follow
  dataflow back from the disagreeing input through those records until values
  known to agree; the records passed are the candidates;
- if no such record exists, the value agreed when A made it and B changed it
  before the read (an op only B runs), or it is a program input;
- a compiled region's output that differs although every op of A behind it
  agrees: B's ops after its last paired op (a pass on the graph's last value)
  are walked back in B and named.

Dataflow keys a value by (tensor id, version). A view shares its base's
storage and version counter, so a write through it (`v[idx] = x` with
`v = h.view(-1)`) is also the base's value at that version, and a view read
after its base was written resolves to that write.

Later disagreements are echoes, counted up to a limit; then reading stops,
so a divergence early in a long run is reported without parsing the rest.
Both files are streamed; what stays in memory is the alignment and bounded
maps of compact producer entries for the walk back.
"""

from __future__ import annotations

import math
import re
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import takewhile
from typing import Any, cast

from tracediff.config import Config, Tolerance
from tracediff.diff.align import SHAPE_TIER, VALUE_TIER
from tracediff.diff.amplified import BARELY_BEYOND, Amplified, Amplifier, amplifies, within_a_products_reach
from tracediff.diff.compare import TensorComparison, TensorDiff, compare_fingerprints
from tracediff.diff.computed import ComputedValues
from tracediff.diff.garbage import Garbage
from tracediff.diff.nan_origin import NanOrigin
from tracediff.diff.noise import Noise
from tracediff.diff.place import Place
from tracediff.diff.precision import CarriedPrecision, only_moves, preserves_values, rewrites_an_input
from tracediff.diff.sample import AGREE, DIFFER, UNCHECKED, AlignmentSample
from tracediff.diff.skeleton import Skeleton, alignable, chain_op, kernel_origin, op_line_key
from tracediff.op_names import base_op, short
from tracediff.trace.reader import Trace
from tracediff.trace.schema import KERNEL, OP, REGION, Fingerprint, Tensor, TraceRecord, without_sketch

# Bounds: producers remembered for the walk back, nodes visited per walk,
# echoes counted before pass 2 stops reading.
_PRODUCER_WINDOW = 200_000
_WALK_LIMIT = 10_000
_INHERITED_LIMIT = 10_000
_STRUCTURE_EXAMPLES = 5

Key = tuple[int, Any]  # (tensor id, version): one value of one tensor
Ref = tuple[int, Any, Any]  # (tensor id, version, base id or None): a value read, maybe through a view


@dataclass(frozen=True)
class Divergence:
    kind: str  # "output" | "nan" | "structure"
    a: Place  # the op reported as the cause (trace A)
    b: Place | None  # B's counterpart of `observed`, or B's op that changed the value
    candidates: tuple[Place, ...]
    worst: TensorDiff | None
    inputs_agree: bool
    note: str
    observed: Place | None = None  # where A first showed the difference, if not at `a`
    # The difference grew from below the tolerance: it may have been made before the first candidate.
    may_start_earlier: bool = False
    # Placed by what B did: a record only B runs read this op's agreed value and wrote another at its line.
    changed_in_b: bool = False
    # An input that no recorded op of A made differs: a program input, parameter or buffer made differently.
    program_input: bool = False

    @property
    def rel_diff(self) -> float | None:
        return None if self.worst is None else self.worst.comparison.rel_diff


@dataclass
class DiffResult:
    a: Skeleton
    b: Skeleton
    first: Divergence | None = None
    inherited: int = 0  # later records whose outputs also disagree
    inherited_complete: bool = True  # False: counting stopped at the limit
    compared: int = 0  # paired records compared
    paired: int = 0
    unpaired_a: int = 0
    unpaired_b: int = 0
    structure: list[str] = field(default_factory=list)
    structure_count: int = 0
    noise: Noise | None = None  # calibrated per-tensor noise the comparison used
    passed_by_noise: int = 0  # compared tensors beyond the tolerance but within the noise
    closest_to_noise: float = 0.0  # largest multiple of its noise a tensor passed only by noise reached
    amplified: Amplified | None = None  # values that differ only by amplified sub-tolerance differences

    @property
    def nan_origin_a(self) -> NanOrigin | None:
        return self.a.nan_origin

    @property
    def nan_origin_b(self) -> NanOrigin | None:
        return self.b.nan_origin


def _key(t: Tensor) -> Key:
    return t["id"], t.get("v")


def _fingerprint_of(t: Tensor) -> Fingerprint:
    """`t`'s fingerprint, where the caller knows it has one (compared, or kept for having one)."""
    fp = t["fp"]
    assert fp is not None
    return fp


def _content(t: Tensor) -> tuple | None:
    """A tensor's content as its fingerprint states it: exact in what no order of summation changes (dtype,
    element count, max), to 7 digits in its sums, which a reinterpreting view (a transposed
    `reinterpret_tensor` of a kernel's buffer) sums in another order; None where it says too little to
    tell values apart (no fingerprint, all zeros)."""
    fp = t.get("fp")
    if not fp or not fp.get("l1"):
        return None
    l1 = fp["l1"]
    return (t.get("dt"), fp.get("n"), fp.get("max"), round(fp.get("sum", 0.0) / l1, _CONTENT_DIGITS),
            float(f"{l1:.{_CONTENT_DIGITS}g}"), float(f"{fp.get('l2', 0.0):.{_CONTENT_DIGITS}g}"))


# Digits of a content's sums that a reordered summation keeps (float32 sums in float64 pairwise: ~1e-7).
_CONTENT_DIGITS = 7


def _ref(t: Tensor) -> Ref:
    return t["id"], t.get("v"), t.get("b")


def _reads(record: TraceRecord) -> tuple[Ref, ...]:
    return tuple(_ref(t) for t in record.get("in", ()) if t.get("fp") is not None or t.get("uninit"))


def _filed(record: TraceRecord, t: Tensor) -> tuple[Key, ...]:
    """The keys an output of `record` is a value of: its own, and its base's when the record wrote
    it through a view (in place, out=, a kernel's buffer). A view shares its base's version
    counter, so `v[idx] = x` makes a new value of the base at the same version."""
    key = _key(t)
    base, version = t.get("b"), t.get("v")
    if base is None or version is None:
        return (key,)
    if record["t"] == KERNEL or any(x["id"] == t["id"] for x in record.get("in", ())):
        return key, (base, version)
    return (key,)  # a view op's new view: the base's value is unchanged


def _resolve(ref: Ref, *tables: OrderedDict) -> Key:
    """The key of a value read: its own if known, else the last write to its base's storage
    at that version (a view read after its base, or another view of it, was written)."""
    key = ref[:2]
    if ref[2] is None or ref[1] is None or any(key in table for table in tables):
        return key
    return ref[2], ref[1]


# Views followed from a value back to the one it shows (a view of a transpose of a reshape ...).
_VIEW_CHAIN_LIMIT = 8


def _put_bounded(table: OrderedDict, key: Key, value: Any) -> None:
    """Insert as newest; drop the oldest entry past the producer window."""
    table.pop(key, None)
    table[key] = value
    if len(table) > _PRODUCER_WINDOW:
        table.popitem(last=False)


@dataclass(frozen=True, slots=True)
class _Produced:
    """What the walk back needs of a record: where it is, what it read."""

    place: Place
    reads: tuple[Ref, ...]
    candidate: bool
    uninit: bool
    moves: bool = False  # only moves or exactly widens values (view, clone, bf16 -> float32): never the one blamed
    outputs: tuple[Tensor, ...] = ()  # a candidate's output tensors (fingerprinted)
    # Paired with B's record, but what it wrote was not fingerprinted (an in-place foreach op's writes).
    unread: bool = False
    backward: bool = False  # run by autograd's backward


class _Walker:
    """Trace A's producers: of values not known to agree (walk back), and of values that agreed."""

    def __init__(self, garbage: Garbage, amplified: Amplified) -> None:
        self.garbage = garbage
        self.amplified = amplified
        self.unknown_producers: OrderedDict[Key, _Produced] = OrderedDict()
        self.agreed: OrderedDict[Key, Place] = OrderedDict()
        self.shown_by_view: OrderedDict[Key, Ref] = OrderedDict()  # an agreed view's value -> the value it shows

    def unknown(self, record: TraceRecord, candidate: bool, compared: bool = False) -> None:
        """`compared`: its outputs were compared (what amplification they carry is already marked)."""
        outs = record.get("out", ())
        entry = _Produced(Place.of(record), _reads(record), candidate, any(t.get("uninit") for t in outs),
                          preserves_values(record), tuple(t for t in outs if t.get("fp")) if candidate else (),
                          backward=bool(record.get("bw")))
        if not compared:
            self.amplified.carry(record)  # made from an amplified value, unseen: amplified too
        for t in outs:
            for key in _filed(record, t):
                self.agreed.pop(key, None)
                _put_bounded(self.unknown_producers, key, entry)

    def known(self, record: TraceRecord) -> None:
        """The record's outputs agree with B's; uninitialized ones stay suspects."""
        place = Place.of(record)
        carried = self.amplified.origin_of_reads(record)
        self.amplified.forget(record)
        if carried is not None and carried.loose_maker is not None:
            # Agreeing now, but made from an update's coherent change (AdamW's `sqrt` of the state its
            # foreach `addcmul_` wrote): a later update reading it still carries that change's maker.
            self.amplified.mark([t for t in record.get("out", ()) if t.get("fp")], carried, observed=False)
        for t in record.get("out", ()):
            for key in _filed(record, t):
                self.unknown_producers.pop(key, None)
                if t.get("uninit"):
                    _put_bounded(self.unknown_producers, key, _Produced(place, _reads(record), True, True))
                elif self.garbage.holds(t):  # a view of uninitialized memory, not compared: walk on to the allocation
                    _put_bounded(self.unknown_producers, key, _Produced(place, _reads(record), False, False))
                elif t.get("unread"):  # written, not fingerprinted (AdamW's foreach step): made here, unseen
                    self.agreed.pop(key, None)
                    _put_bounded(self.unknown_producers, key,
                                 _Produced(place, _reads(record), True, False, unread=True))
                else:
                    _put_bounded(self.agreed, key, place)
                    reads = _reads(record)
                    if len(reads) == 1 and preserves_values(record):
                        _put_bounded(self.shown_by_view, key, reads[0])

    def agreed_value(self, t: Tensor) -> Place | None:
        """The record of A that made `t`'s value, if that value agreed with B's."""
        return self.agreed.get(_resolve(_ref(t), self.agreed, self.unknown_producers))

    def counterpart(self, op: str | None, source: str | None) -> Place | None:
        """The latest record of A whose output agreed that runs `op` at `source` (B's op's own line)."""
        if op is None or source is None:
            return None
        wanted = base_op(op)
        return next((p for p in reversed(self.agreed.values()) if p.source == source and base_op(p.op) == wanted),
                    None)

    def computing_at(self, source: str | None) -> Place | None:
        """A's latest record at `source` that computes (not a view), whether its value agreed or not."""
        if not source:
            return None
        places = [e.place for e in self.unknown_producers.values() if e.place.source == source and not e.moves]
        places += [p for p in self.agreed.values() if p.source == source and not only_moves(p.op)]
        return max(places, key=lambda p: p.index, default=None)

    def outputs_of(self, index: int) -> tuple[Tensor, ...]:
        """The output tensors of A's unpaired candidate record `index` (if still remembered)."""
        entry = self.unpaired(index)
        return entry.outputs if entry is not None else ()

    def unpaired(self, index: int) -> _Produced | None:
        """A's unpaired record `index` (if still remembered)."""
        return next((e for e in reversed(self.unknown_producers.values()) if e.place.index == index), None)

    def agreed_place(self, index: int) -> Place | None:
        """A's record `index`, if its output agreed (and is still remembered)."""
        return next((p for p in reversed(self.agreed.values()) if p.index == index), None)

    def agreed_computing_at(self, source: str | None, before: int | None = None) -> Place | None:
        """A's latest record at `source` that computes and whose output agreed with B's (before record `before`)."""
        if not source:
            return None
        return next((p for p in reversed(self.agreed.values()) if p.source == source and not only_moves(p.op)
                     and (before is None or p.index < before)), None)

    def agreed_through_views(self, t: Tensor) -> Place | None:
        """The record of A that made `t`'s value, if that value agreed with B's, seen through the
        views (unpaired, value-preserving records) between it and `t`."""
        refs = [_ref(t)]
        for _ in range(_VIEW_CHAIN_LIMIT):
            key = _resolve(refs[0], self.agreed, self.unknown_producers)
            if key in self.agreed:
                return self.agreed[key]
            entry = self.unknown_producers.get(key)
            if entry is None or not entry.moves or len(entry.reads) != 1:
                return None
            refs = list(entry.reads)
        return None

    def maker_behind_views(self, t: Tensor) -> Place | None:
        """`agreed_through_views(t)`; where that record only moves values (autograd's `t` of a weight
        gradient), the op of A computing the value it shows (the `mm`), compared or not."""
        return self._maker_behind_views(_ref(t))

    def _maker_behind_views(self, ref: Ref) -> Place | None:
        last_agreed = None
        for _ in range(_VIEW_CHAIN_LIMIT):
            key = _resolve(ref, self.agreed, self.unknown_producers)
            if key in self.agreed:
                last_agreed = self.agreed[key]
                if not only_moves(last_agreed.op) or key not in self.shown_by_view:
                    return last_agreed
                ref = self.shown_by_view[key]
                continue
            entry = self.unknown_producers.get(key)
            if entry is not None and not entry.moves:  # computing: the maker if a view of its value agreed
                return entry.place if last_agreed is not None else None
            if entry is None or len(entry.reads) != 1:
                return last_agreed
            ref = entry.reads[0]
        return last_agreed

    def maker(self, t: Tensor) -> Place | None:
        """The record of A that computed `t`'s value, compared or not, seen through views."""
        ref = _ref(t)
        for _ in range(_VIEW_CHAIN_LIMIT):
            key = _resolve(ref, self.agreed, self.unknown_producers)
            if key in self.agreed:
                return self._maker_behind_views(ref)
            entry = self.unknown_producers.get(key)
            if entry is None:
                return None
            if not entry.moves or len(entry.reads) != 1:
                return entry.place
            ref = entry.reads[0]
        return None

    def agreed_maker(self, reads: tuple[Ref, ...]) -> Place | None:
        """The record of A whose agreeing output is among `reads`, if one is."""
        for ref in reads:
            place = self.agreed.get(_resolve(ref, self.agreed, self.unknown_producers))
            if place is not None:
                return place
        return None

    def walk_back(self, start: list[Tensor]) -> list[_Produced]:
        """Candidate records upstream of the `start` tensors, oldest first."""
        found: dict[int, _Produced] = {}
        visited: set[int] = set()
        stack = [_ref(t) for t in start]
        while stack and len(visited) < _WALK_LIMIT:
            entry = self.unknown_producers.get(_resolve(stack.pop(), self.unknown_producers, self.agreed))
            if entry is None or entry.place.index in visited:
                continue
            visited.add(entry.place.index)
            if entry.candidate:
                found[entry.place.index] = entry
            stack.extend(entry.reads)
        return [found[i] for i in sorted(found)]


@dataclass(frozen=True, slots=True)
class _Made:
    """Who made a value in trace B (for naming an op only B runs), and what it read (for walking back)."""

    place: Place
    kernel: str | None
    fused: tuple[str, ...]
    op: str | None = None  # the op it computes (a kernel: the last op it fuses)
    reads: tuple[Ref, ...] = ()
    moves: bool = False  # only moves, exactly widens or rewrites values it read: never the one named
    only_b: bool = False  # an alignable record the aligner gave no partner in A: an op only B runs
    foreign: bool = False  # only B computes its op at its line (a compiler pass inserted it)
    read_values: tuple[Tensor, ...] = ()  # an op only B runs, or foreign: the tensors it read (fingerprinted)
    wrote: tuple[tuple, ...] = ()  # an op only B runs: the contents (`_content`) of what it wrote
    read_contents: tuple[tuple, ...] = ()  # an op only B runs: the contents of what it read
    fused_lines: frozenset[str] = frozenset()  # a kernel: the source lines of the ops it fuses
    unread: bool = False  # wrote values in place it did not return, not fingerprinted (AdamW's foreach step)
    backward: bool = False  # run by autograd's backward (a compiled backward's kernel)

    def read(self, value: Tensor, tolerance: Tolerance) -> bool:
        """Did this record read `value` (a tensor of A's), within `tolerance`? A dispatched op's input of
        A's shape is compared with its sketch too: its elements are in A's order, and the order-free
        statistics alone miss a change that keeps the norms (a tied embedding's gradient 3e-4 off, its l2
        within 3e-6). A kernel's buffer is compared by those statistics alone (`without_sketch`)."""
        mine = without_sketch(_fingerprint_of(value))
        for t in self.read_values:
            in_order = self.kernel is None and t.get("sh") == value.get("sh")
            if compare_fingerprints(_fingerprint_of(value) if in_order else mine,
                                    _fingerprint_of(t) if in_order else without_sketch(_fingerprint_of(t)), tolerance).ok:
                return True
        return False

    def describe(self) -> str:
        if self.kernel:
            return f"kernel {self.kernel} ({', '.join(self.fused)})"
        return self.place.op


class _BSide:
    """Trace B streamed in step with A: its alignable records, and who made each value."""

    def __init__(self, path: Any, paired: bytearray, a_op_lines: set[int]) -> None:
        self.producers: OrderedDict[Key, _Made] = OrderedDict()
        # The same values by content: inductor's wrapper reads a kernel's buffer through
        # `reinterpret_tensor`, a new tensor no dispatched op made.
        self.by_content: OrderedDict[tuple, tuple[Key, _Made]] = OrderedDict()
        # Values read that no record made, and the key of the last value written with their content.
        self.read_as: OrderedDict[Key, Key] = OrderedDict()
        self._paired = paired  # per alignable record of B: does it have a partner in A?
        self._a_op_lines = a_op_lines  # the ops A computes, by line (`op_line_key`)
        self.agreed: OrderedDict[Key, int] = OrderedDict()  # B's values known to agree with A's: A's record
        self.agreed_contents: OrderedDict[tuple, int] = OrderedDict()  # the same, by content
        # Of those, values that agreed only within the absolute tolerance, far from zero (see _loose).
        self.loose: OrderedDict[Key, None] = OrderedDict()
        self._records = self._alignable(Trace(path))
        self.index = -1
        self.current: TraceRecord | None = None

    def _alignable(self, trace: Trace) -> Iterator[TraceRecord]:
        count = 0
        for record in trace:
            outs = record.get("out", ())
            is_alignable = alignable(record)
            for t in record.get("in", ()):
                self._note_read(t)
            if outs and record["t"] != REGION:  # a region's exit only shows values its ops made
                only_b = is_alignable and not self._paired[count]
                foreign = op_line_key(record) not in self._a_op_lines
                made = _Made(Place.of(record), record.get("name") if record["t"] == KERNEL else None,
                             tuple(f["op"] for f in record.get("fuses") or ()), chain_op(record), _reads(record),
                             preserves_values(record) or rewrites_an_input(record), only_b=only_b, foreign=foreign,
                             read_values=tuple(t for t in record.get("in", ()) if t.get("fp"))
                             if only_b or foreign else (),
                             wrote=tuple(c for c in map(_content, outs) if c is not None) if only_b else (),
                             read_contents=tuple(c for c in map(_content, record.get("in", ())) if c is not None)
                             if only_b else (),
                             fused_lines=frozenset(src for f in record.get("fuses") or () if (src := f.get("src"))),
                             unread=any(t.get("unread") for t in outs), backward=bool(record.get("bw")))
                for t in outs:
                    for key in _filed(record, t):
                        _put_bounded(self.producers, key, made)
                    content = _content(t)
                    if content is not None:
                        _put_bounded(self.by_content, content, (_key(t), made))
            if is_alignable:
                count += 1
                yield record

    def _note_read(self, t: Tensor) -> None:
        """A tensor read that no record made (inductor's `reinterpret_tensor` of a kernel's buffer,
        passed to an extern `mm`): remember whose content it holds, for the walk back."""
        if t.get("fp") is None or _key(t) in self.read_as or _resolve(_ref(t), self.producers) in self.producers:
            return  # the first read is the one closest to the write (a later one may find its own copy)
        content = _content(t)
        if content is not None and content in self.by_content:
            _put_bounded(self.read_as, _key(t), self.by_content[content][0])

    def agree(self, record: TraceRecord, a_index: int, loose: Iterable[Tensor] = ()) -> None:
        """B's `record` was paired with A's record `a_index`, whose outputs agree: so do its outputs.
        `loose`: those of its outputs that agreed only within the absolute tolerance (_loose)."""
        loose_args = {t.get("a") for t in loose}
        for t in record.get("out", ()):
            if t.get("unread"):  # written, never fingerprinted: not known to agree
                continue
            for key in _filed(record, t):
                _put_bounded(self.agreed, key, a_index)
                if t.get("a") in loose_args:
                    _put_bounded(self.loose, key, None)
            content = _content(t)
            # A value that agreed only loosely is no evidence that a record writing its content recomputes A's
            # value (a pass's `mul` of a small gradient, then a view of it paired and agreeing within atol).
            if content is not None and t.get("a") not in loose_args:
                _put_bounded(self.agreed_contents, content, a_index)

    def recomputes(self, made: _Made) -> bool:
        """Does B's record `made` (one only B runs) write exactly a value that agreed with one of A's? Then it
        recomputes that value (inductor recomputes a forward `gelu` inside a compiled backward)."""
        return any(content in self.agreed_contents for content in made.wrote)

    def read_a_recomputed_value_of(self, made: _Made, a_index: int) -> bool:
        """Did B's record `made` read a value holding exactly what A's record `a_index` wrote (a value B
        recomputed: no key of B's agreed with it, its content did)?"""
        return any(self.agreed_contents.get(content) == a_index for content in made.read_contents)

    def read_the_value_of(self, made: _Made, a_index: int) -> bool:
        """Did B's record `made` read a value that agreed with the output of A's record `a_index`?"""
        return a_index in self.agreed_values_read(made)

    def agreed_values_read(self, made: _Made) -> list[int]:
        """The records of A whose outputs agreed with values B's record `made` read."""
        found = (self.agreed.get(_resolve(ref, self.agreed, self.producers)) for ref in made.reads)
        return [a_index for a_index in found if a_index is not None]

    def producer(self, t: Tensor) -> _Made | None:
        """The record of B that made `t`'s value (through a view: the last write to its base; a tensor no
        record made, such as inductor's `reinterpret_tensor` of a kernel's buffer returned as a gradient:
        the last record writing its content)."""
        key = _resolve(_ref(t), self.producers)
        if key not in self.producers:
            key = self.read_as.get(key, key)
        return self.producers.get(key)

    def computing_producer(self, t: Tensor) -> _Made | None:
        """`producer(t)`, or where that record writes exactly what it read (a detach, a bias `add` of zeros
        after a pass's `mul`), the last record behind it that computes: the one that made the value."""
        made = self.producer(t)
        if made is not None and made.moves:
            made = next((m for m in reversed(self.walk_back(t)) if not m.moves), None)
        return made

    def walk_back(self, start: Tensor, through_loose: bool = False,
                  through_updates: bool = False) -> list[_Made]:
        """The records of B that made the value of `start` (a tensor) from values known to agree, oldest first.

        These ran only in B (no record of A agreed with them): a compiler pass's
        inserted op, a kernel writing a value after the last paired op. `through_loose`:
        values that agreed only within the absolute tolerance (_loose) do not stop the walk;
        nor, with `through_updates`, do records whose writes were not fingerprinted (AdamW's
        foreach step): behind those lie a whole backward's loosely agreeing gradients.
        """
        found: dict[int, _Made] = {}
        first = _resolve(_ref(start), self.producers, self.agreed)
        content = _content(start)
        if first not in self.producers and first not in self.agreed and content is not None and content in self.by_content:
            first = self.by_content[content][0]  # a tensor no record made: the last one writing its content
        stack = [(*first, None)]
        while stack and len(found) < _WALK_LIMIT:
            key = _resolve(stack.pop(), self.producers, self.agreed)
            if key not in self.producers and key not in self.agreed:
                key = self.read_as.get(key, key)
            made = self.producers.get(key)
            if (key in self.agreed and not (through_loose and key in self.loose)) or made is None \
                    or made.place.index in found:
                continue
            found[made.place.index] = made
            if not made.unread or not through_loose or through_updates:
                stack.extend(made.reads)
        return [found[i] for i in sorted(found)]

    def rest(self) -> Iterator[TraceRecord]:
        """B's alignable records after the current one (all unpaired once A is done)."""
        yield from self._records

    def advance_to(self, j: int) -> Iterator[TraceRecord]:
        """Move to B's alignable record `j`; yields the ones passed over (unpaired)."""
        while self.index < j:
            self.current = next(self._records)
            self.index += 1
            if self.index < j:
                yield self.current


@dataclass(frozen=True)
class _LooseEntry:
    """Where a change below the tolerance came in: a value A made with ops no record of B pairs with
    (`places`, computing ops, oldest first), which an op (`read_at`) read agreeing only within the absolute
    tolerance, changed by more than rtol relative (`rel_diff`); or a paired op (`places` and `read_at`
    both it) whose output moved far more than its inputs, still within the tolerance."""

    places: tuple[Place, ...]
    read_at: Place
    rel_diff: float
    how: str  # says which of the two, for the report


class _LooseEntries:
    """Which of A's agreeing values carry a change that came in below the tolerance, and where it came in.
    A difference that grows from there (a loss's gradient 0.5% off, its elements of about 1e-3 moving by
    less than the absolute tolerance, 1e-5, carried through a backward until an `mm` shows it barely
    beyond the tolerance) was made there, not at the op where it first exceeds the tolerance."""

    def __init__(self) -> None:
        self.carried: OrderedDict[Key, _LooseEntry] = OrderedDict()

    def read_by(self, ra: TraceRecord, passed: list[tuple[Tensor, Tensor, TensorComparison]],
                walker: _Walker) -> _LooseEntry | None:
        """The earliest entry that `ra`'s inputs carry (compared or not: a kernel's buffers need not be A's
        op's arguments), or that one of its agreeing inputs (`passed`) starts."""
        found = [entry for t in ra.get("in", ()) if (entry := self._of(t, walker)) is not None]
        for ta, _tb, comparison in passed:
            if not found and _far_from_zero_and_loose(ta, comparison):
                made = walker.walk_back([ta])
                if any(c.unread for c in made):
                    continue  # made by an update whose writes were not read (AdamW's foreach step): judged apart
                places = tuple(c.place for c in made if not c.moves and not only_moves(c.place.op))
                if places:
                    how = (f"{Place.of(ra).op} (#{ra['i']}) read the value of {places[-1].op}{places[-1].at}, "
                           f"which no record of B pairs with, {comparison.rel_diff:.2g} off relative (beyond rtol, "
                           "small values within atol)")
                    found.append(_LooseEntry(places, Place.of(ra), comparison.rel_diff, how))
        return min(found, key=lambda e: e.read_at.index, default=None)

    @staticmethod
    def started_by(ra: TraceRecord, passed: list[tuple[Tensor, Tensor, TensorComparison]],
                   out_passed: list[tuple[Tensor, Tensor, TensorComparison]]) -> _LooseEntry | None:
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
        return _LooseEntry((place,), place, moved, how)

    def carry(self, ra: TraceRecord, moved: Iterable[Tensor], entry: _LooseEntry | None) -> None:
        """`ra`'s outputs that moved at all (`moved`, A's tensors) carry what its inputs carried."""
        if entry is None:
            return
        for ta in moved:
            for key in _filed(ra, ta):
                _put_bounded(self.carried, key, entry)

    def _of(self, t: Tensor, walker: _Walker) -> _LooseEntry | None:
        """The entry `t`'s value carries, also through the unpaired views and ops of A that made it."""
        refs, seen = [_ref(t)], 0
        while refs and seen < _VIEW_CHAIN_LIMIT:
            ref = refs.pop()
            seen += 1
            key = _resolve(ref, self.carried, walker.unknown_producers)
            if key in self.carried:
                return self.carried[key]
            producer = walker.unknown_producers.get(key)
            if producer is not None:
                refs.extend(producer.reads)
        return None


# A change this many times below rtol, from inputs that moved this many times less, is no rounding.
_FAR_BELOW = 30.0


def _moved(passed: list[tuple[Tensor, Tensor, TensorComparison]]) -> list[Tensor]:
    """A's tensors of agreeing pairs that are not equal to B's."""
    return [ta for ta, _tb, comparison in passed if comparison.rel_diff > 0]


def _far_from_zero_and_loose(ta: Tensor, c: TensorComparison) -> bool:
    """A value that agreed only within the absolute tolerance while far from zero (see `_loose`)."""
    return (c.rel_diff > c.tolerance.rtol and c.tolerance.atol > 0
            and abs(_fingerprint_of(ta).get("max", 0.0)) > _FAR_FROM_ZERO * c.tolerance.atol)


def _from_a_loose_entry(first: Divergence, entry: _LooseEntry | None) -> Divergence:
    """`first`, or, where it may have started earlier, the ops whose change came in below the tolerance
    upstream of it (`entry`): named, with `first`'s candidates kept."""
    if entry is None or not first.may_start_earlier:
        return first
    shown = first.observed or first.a
    made = entry.places[-1]
    note = (f"at {shown.op} (#{shown.index}): {first.note}; what it read carries a change that came in below the "
            f"tolerance: {entry.how}")
    candidates = tuple(dict.fromkeys((*entry.places, *first.candidates)))
    return replace(first, a=made, candidates=candidates, observed=shown, inputs_agree=False, note=note)


class _Comparer:
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
        for ta, tb in _pair_tensors(ra.get("in", []), rb.get("in", []), by_name):
            if _same_elements(ta, tb):
                tolerance = self.precision.of(ta, ra.get("op") or "", ra.get("m"))
                fp_a, fp_b = _fingerprint_of(ta), _fingerprint_of(tb)
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
                padded = cast(Fingerprint, dict(without_sketch(_fingerprint_of(tb)), n=_fingerprint_of(ta).get("n")))
                if compare_fingerprints(without_sketch(_fingerprint_of(ta)), padded, tolerance).ok:
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
        for ta, tb in _pair_tensors(xs, ys, by_name):
            # An output that is torch.empty's memory seen through a view: garbage either way, not a result.
            if not _comparable(ta, tb) or (side == "output" and self.garbage.holds(ta)):
                continue
            compared += 1
            tolerance = self.precision.of(ta, op, ra.get("m"))
            fp_a, fp_b = ta["fp"], tb["fp"]
            assert fp_a is not None and fp_b is not None  # `_comparable`
            fa, fb = (without_sketch(fp_a), without_sketch(fp_b)) if kernel else (fp_a, fp_b)
            if self.noise is not None and tolerance.rtol > 0:
                noise = self.noise.get(ra["i"], side, ta["a"])
                result = compare_fingerprints(fa, fb, tolerance, noise, self.noise.factor)
                self.passed_by_noise += result.by_noise
                if result.by_noise and result.above_noise is not None and math.isfinite(result.above_noise):
                    self.closest = max(self.closest, result.above_noise)
            else:
                result = compare_fingerprints(fa, fb, tolerance)
            if rels is not None:
                rels.append(result.rel_diff)
            if not result.ok:
                out.append(TensorDiff(side, ta["a"], ta["dt"], tuple(ta["sh"]), fp_a, fp_b, result))
            elif passed is not None:
                passed.append((ta, tb, result))
        return out, compared


def _same_elements(ta: Tensor, tb: Tensor) -> bool:
    """Tensors of other shapes holding as many elements of one dtype: a kernel reads the buffer A's
    op reads through a view (`_unsafe_view` of an `mm`'s output)."""
    fa, fb = ta.get("fp"), tb.get("fp")
    return (fa is not None and fb is not None and not ta.get("uninit") and not tb.get("uninit")
            and ta["dt"] == tb["dt"] and ta["sh"] != tb["sh"] and fa.get("n") == fb.get("n"))


def _comparable(ta: Tensor, tb: Tensor) -> bool:
    return (
        ta.get("fp") is not None and tb.get("fp") is not None and not ta.get("uninit") and not tb.get("uninit")
        and ta["dt"] == tb["dt"] and ta["sh"] == tb["sh"]
    )


def _pair_tensors(xs: list[Tensor], ys: list[Tensor], by_name: bool) -> Iterator[tuple[Tensor, Tensor]]:
    """Corresponding tensors: by argument name when both ops name them alike, else by order."""
    if by_name:
        named = {t["a"]: t for t in ys}
        if all(t["a"] in named for t in xs):
            for t in xs:
                yield t, named[t["a"]]
            return
    yield from zip(xs, ys)


def _worst(diffs: list[TensorDiff]) -> TensorDiff:
    return max(diffs, key=lambda d: (d.comparison.nonfinite,
                                     d.comparison.rel_diff if math.isfinite(d.comparison.rel_diff) else 1e308))


def _kind(worst: TensorDiff | None) -> str:
    return "nan" if worst is not None and worst.comparison.nonfinite else "output"


def _kernel_named_for(kernel: TraceRecord, ra: TraceRecord) -> bool:
    """Does a kernel at A's op's line write that op's value? Inductor names a kernel after the aten ops
    its nodes came from before decomposition (`triton_poi_fused_addmm_22` adds the bias of an `addmm`
    that became `mm` + `add`), so a kernel at the same line named for A's op computes the same quantity."""
    if ra["t"] != OP or not ra.get("src") or kernel.get("src") != ra["src"]:
        return False
    name = short(ra["op"])
    return f"_{name}_" in f"_{kernel_origin(str(kernel.get('name', ''))) or ''}_"


def _same_op(ra: TraceRecord, rb: TraceRecord) -> bool:
    """Do the two records compute the same op (a kernel: the last op it fuses)?"""
    if ra["t"] == REGION or rb["t"] == REGION:
        return ra["t"] == rb["t"]
    name_b = chain_op(rb)
    return name_b is not None and base_op(ra.get("op", "")) == base_op(name_b)


def _tensor_args(record: TraceRecord) -> set[str]:
    return {t["a"] for t in record.get("in", ()) if t.get("fp") is not None or t.get("uninit")}


def _inputs_mismatch(ra: TraceRecord, rb: TraceRecord, by_name: bool) -> bool:
    """Do corresponding inputs differ in dtype or shape (so they cannot be said to agree)?"""
    xs = [t for t in ra.get("in", ()) if t.get("fp") is not None]
    ys = [t for t in rb.get("in", ()) if t.get("fp") is not None]
    return len(xs) != len(ys) or any(ta["dt"] != tb["dt"] or ta["sh"] != tb["sh"] for ta, tb in _pair_tensors(xs, ys, by_name))


def _comparable_pair(ra: TraceRecord, rb: TraceRecord, tier: int, comparer: _Comparer, by_name: bool) -> bool:
    """Is a pair from the aligner evidence enough to compare outputs?

    - Same op, called with different tensor arguments (inductor on CUDA calls
      `convolution` without its bias and adds the bias in a fused kernel): the
      outputs are different quantities. In-place and functional forms count as
      the same op (`add_` vs `add`): a compiled Adam step calls
      `denom.add(eps / -lr)` with a tensor where eager calls `denom.add_(eps)`.
    - Different ops paired on shapes alone: only a substitution (cos computed
      as sin) when both read values that were compared and agree.
    """
    if ra["t"] == OP and rb["t"] == OP and base_op(ra["op"]) == base_op(rb["op"]) and (
            _tensor_args(ra) != _tensor_args(rb) or _inputs_mismatch(ra, rb, by_name)):
        return False  # the same op on other arguments, or on inputs of other shapes: other quantities
    if tier == SHAPE_TIER and not _same_op(ra, rb):
        if rb["t"] == KERNEL:
            return _kernel_named_for(rb, ra) and not comparer.reads_the_output_of(rb, ra)
        substituted, compared_inputs = comparer.diffs("input", ra.get("in", []), rb.get("in", []), ra, by_name)
        return bool(compared_inputs) and not substituted
    return True


def find_divergence(a: Skeleton, b: Skeleton, partner: array, tier: bytearray, config: Config, *,
                    sample: AlignmentSample | None = None, noise: Noise | None = None) -> DiffResult:
    """Walk A with B in step; `sample`, if given, is told every aligned row (for the HTML report)."""
    result = DiffResult(a, b, noise=noise)
    compiled = bool((a.footer or {}).get("compile_calls") or (b.footer or {}).get("compile_calls"))
    comparer = _Comparer(config, noise)
    amplified = result.amplified = Amplified()
    walker = _Walker(comparer.garbage, amplified)
    paired_b = bytearray(len(b))
    for j in partner:
        if j >= 0:
            paired_b[j] = 1
    b_side = _BSide(b.path, paired_b, a.op_lines)
    b_values = ComputedValues(b.path)
    rejected = 0
    alignable_index = -1
    # The first value B changed after it agreed whose reader's output still agreed (within the tolerance).
    absorbed: Divergence | None = None
    # Changes that came in below the tolerance, and the one the first divergence's inputs carry.
    loose_entries, first_entry = _LooseEntries(), None
    # A's compiled regions: open ones, and whether any was seen (ops outside them run eagerly in both runs).
    open_regions, seen_regions = 0, False

    def example(side: str, record: TraceRecord) -> None:
        if (record["t"] == REGION or not compiled) and len(result.structure) < _STRUCTURE_EXAMPLES:
            place = Place.of(record)
            result.structure.append(f"only in {side}: {place.op}{place.at} (#{place.index})")

    for ra in Trace(a.path):
        if sample is not None and result.first is not None:
            sample.diverged()  # found at the previous row
        comparer.precision.record(ra)
        comparer.garbage.record(ra)
        if ra["t"] == REGION:
            seen_regions = True
            open_regions = open_regions + 1 if ra["ev"] == "enter" else max(open_regions - 1, 0)
        if not alignable(ra):
            walker.unknown(ra, candidate=False)  # pass-through for the walk back (detach, alias)
            continue
        alignable_index += 1
        j = partner[alignable_index]
        ignored = ra["t"] == OP and config.is_ignored(ra["op"], ra.get("m"))
        if j < 0:
            walker.unknown(ra, candidate=not ignored)
            example("A", ra)
            if sample is not None:
                sample.only_a(ra)
            continue
        for skipped in b_side.advance_to(j):
            example("B", skipped)
            if sample is not None:
                sample.only_b(skipped)
        rb = b_side.current
        assert rb is not None
        # A one-op kernel's buffers are its op's arguments, in order; other pairs match by name when the op is the same.
        by_name = (ra.get("op") == rb.get("op") or ra["t"] == REGION) and rb["t"] != KERNEL
        if not _comparable_pair(ra, rb, tier[alignable_index], comparer, by_name):
            rejected += 1
            walker.unknown(ra, candidate=not ignored)
            if sample is not None:
                sample.pair(ra, rb, None, UNCHECKED)
            continue
        if ignored:
            # Not compared and never a cause, but the walk back may pass through it.
            walker.unknown(ra, candidate=False)
            if sample is not None:
                sample.pair(ra, rb, None, UNCHECKED)
            continue
        rels: list[float] | None = [] if sample is not None else None
        kernel = KERNEL in (ra["t"], rb["t"])
        out_passed: list = []
        out_diffs, _ = comparer.diffs("output", ra.get("out", []), rb.get("out", []), ra, by_name=True, rels=rels,
                                      passed=out_passed, kernel=kernel)
        if out_diffs and tier[alignable_index] == VALUE_TIER and not _same_op(ra, rb):
            # Different ops paired only because their rounded fingerprints collided (a softmax
            # and the dropout after it both sum to the row count): not the same value, no pair.
            rejected += 1
            walker.unknown(ra, candidate=True)
            if sample is not None:
                sample.only_a(ra)
            continue
        result.compared += 1
        if sample is not None:
            sample.pair(ra, rb, max(rels) if rels else None, DIFFER if out_diffs else AGREE)
        if result.first is not None:
            result.inherited += bool(out_diffs)
            if result.inherited >= _INHERITED_LIMIT:
                result.inherited_complete = False
                break
            continue
        passed: list[tuple[Tensor, Tensor, TensorComparison]] = []
        in_diffs, _ = comparer.diffs("input", ra.get("in", []), rb.get("in", []), ra, by_name=by_name, passed=passed,
                                     kernel=kernel)
        first_entry = loose_entries.read_by(ra, passed, walker)  # kept from the record that sets `result.first`
        # Inputs that differ only because an earlier op amplified sub-tolerance noise are no cause here.
        origins = [_input_origin(ra, d, amplified) for d in in_diffs]
        carried = [d for d, origin in zip(in_diffs, origins) if origin is not None]
        in_diffs = [d for d, origin in zip(in_diffs, origins) if origin is None]
        if carried and not in_diffs and (found := _changed_before_an_unread_update(
                ra, rb, carried, [o for o in origins if o is not None], by_name, walker, b_side)):
            result.first = found
            continue

        # A kernel of several ops, or of one piece of A's op's decomposition (tanh_backward's last
        # `mul`): its value is A's op's, its inputs are not A's op's inputs.
        fused_kernel = rb["t"] == KERNEL and (len(rb.get("fuses") or ()) != 1 or not _same_op(ra, rb))
        if fused_kernel and out_diffs and tier[alignable_index] != VALUE_TIER and ra["t"] == OP and _far_apart(
                out_diffs) and b_values.hold_all(_differing(ra, out_diffs),
                                                 partial(comparer.precision.of, op=ra["op"], module=ra.get("m"))):
            # Paired on op and shapes with a kernel writing another quantity (GELU's backward: several
            # `mul`s at one line, run in another order), while B computed A's very value elsewhere.
            result.compared -= 1
            rejected += 1
            walker.unknown(ra, candidate=True)
            continue
        if (ra["t"] == REGION and ra["ev"] == "exit") or fused_kernel:
            # A region's outputs come from the ops inside it, a kernel's from the ops it
            # fuses: those are the candidates. Their inputs are not comparable one to one.
            if out_diffs:
                bad = [t for t in ra.get("out", []) if t["a"] in {d.arg for d in out_diffs}]
                # A kernel reading an amplified value: its differences are amplified too (fused, so unseen).
                origin = amplified.origin_of_reads(ra) if fused_kernel else None
                if origin is not None:
                    amplified.mark(bad, origin)
                    walker.unknown(ra, candidate=False, compared=True)
                elif ra["t"] == REGION and bad and all(origins := [amplified.origin(t) for t in bad]):
                    # Amplified noise changes the program's results beyond the tolerance: never a match.
                    if origins[0].reported_as is not None:  # type: ignore[union-attr]
                        # Where its sign only kept a close case from failing a match: as it would have been on the
                        # spot, with the loose entry it read then.
                        result.first, first_entry = origins[0].reported_as  # type: ignore[union-attr]
                    else:
                        result.first = _amplified_reached(ra, rb, origins[0], out_diffs)  # type: ignore[arg-type]
                else:
                    bad = [t for t in bad if amplified.origin(t) is None]
                    if ra["t"] == OP:
                        walker.unknown(ra, candidate=True)  # the chain's last op is a candidate too
                    candidates = walker.walk_back(bad)
                    tb = _out_pair(ra, rb, _worst(out_diffs))
                    result.first = ((not candidates and _made_only_in_b(ra, rb, out_diffs, walker, b_side))
                                    or (candidates and _changed_after_its_pair(ra, rb, tb, _places(candidates),
                                                                               out_diffs, walker, b_side, comparer))
                                    or _from_walk(ra, rb, candidates, out_diffs, inputs_agree=True))
            else:
                absorbed = absorbed or _absorbed_change(ra, rb, in_diffs, kernel, comparer, walker, b_side, by_name)
                loose_entries.carry(ra, _moved(out_passed),
                                    first_entry or loose_entries.started_by(ra, passed, out_passed))
                walker.known(ra)
                b_side.agree(rb, ra["i"], _loose(out_passed))
            continue
        if out_diffs and not in_diffs and carried:
            # Differs only because it reads amplified values: amplified too, not a cause.
            amplified.mark(_differing(ra, out_diffs), next(o for o in origins if o is not None))
            walker.unknown(ra, candidate=False, compared=True)
        elif out_diffs and not in_diffs and ra["t"] == OP and preserves_values(ra):
            # A view, slice or copy changes no value: its input held the difference, within the tolerance
            # over the whole tensor (a slice keeps the part where it sits). Never the cause.
            if amplified.first is not None:
                amplified.mark(_differing(ra, out_diffs), amplified.first)
                walker.unknown(ra, candidate=False, compared=True)
            else:
                result.first = _shown_by_a_move(ra, rb, passed, out_diffs, walker)
        elif out_diffs and not in_diffs:
            worst = _worst(out_diffs)
            mismatch = _inputs_mismatch(ra, rb, by_name)
            judged = not (mismatch or worst.comparison.nonfinite)
            why = amplifies(ra, rb, passed, seen_regions and not open_regions) if judged else None
            reach = within_a_products_reach(ra, passed, worst) if judged and why is None else None
            if mismatch:  # never claim agreement of inputs that could not be compared
                note = (f"outputs differ; its inputs cannot be compared one to one with those of B's "
                        f"{Place.of(rb).op} (other shapes or dtypes)")
                result.first = (_changed_after_its_pair(ra, rb, _out_pair(ra, rb, worst), (Place.of(ra),), out_diffs,
                                                        walker, b_side)
                                or Divergence(_kind(worst), Place.of(ra), Place.of(rb), (Place.of(ra),), worst, False, note))
            elif why is not None and (changed := _changed_below_the_absolute_tolerance(ra, rb, passed, out_diffs,
                                                                                        walker, b_side)):
                result.first = changed
            elif why is not None:
                # Possibly ill-conditioned on noise below the tolerance: judged by whether it reaches a region's exit.
                amplified.mark(_differing(ra, out_diffs), Amplifier(Place.of(ra), Place.of(rb), worst, why))
                loose_entries.carry(ra, [*_differing(ra, out_diffs), *_moved(out_passed)], first_entry)
                walker.unknown(ra, candidate=False, compared=True)
            else:
                on_the_spot = _unsure_if_inputs_moved(
                    Divergence(_kind(worst), Place.of(ra), Place.of(rb), (Place.of(ra),), worst, True,
                               "inputs agree, outputs differ"), passed)
                if reach is None:
                    result.first = on_the_spot
                else:  # judged by whether it reaches a region's exit; if it does, reported as on the spot
                    amplified.mark(_differing(ra, out_diffs),
                                   Amplifier(Place.of(ra), Place.of(rb), worst, reach,
                                             reported_as=(on_the_spot, first_entry)))
                    loose_entries.carry(ra, [*_differing(ra, out_diffs), *_moved(out_passed)], first_entry)
                    walker.unknown(ra, candidate=False, compared=True)
        elif in_diffs and (out_diffs or ra["t"] == REGION):
            bad = [t for t in ra.get("in", []) if t["a"] in {d.arg for d in in_diffs}]
            # A region's record has no op: its name stands for one (never a KeyError on a region).
            tolerance_of = partial(comparer.precision.of, op=ra.get("op") or ra.get("name") or "", module=ra.get("m"))
            if tier[alignable_index] != VALUE_TIER and ra["t"] == OP and not _fed_by_b_only(
                    ra, rb, in_diffs, b_side, by_name, tolerance_of) and b_values.hold_all(bad, tolerance_of):
                # A crossed pair: B computed these very inputs but fed them to another record of the
                # same op and shapes (a compiled backward orders the gradients of k and v otherwise).
                # Not when B made the input it read with an op only B runs: B changed the value in between.
                result.compared -= 1
                rejected += 1
                walker.unknown(ra, candidate=True)
                continue
            candidates = walker.walk_back(bad)
            _, tb = _input_pair(ra, rb, _worst(in_diffs), by_name)
            if candidates and all(c.moves for c in candidates):
                # Views cannot change a value: if B changed it with records only B ran, name those.
                made_in_b = b_side.walk_back(tb) if tb is not None else []
                result.first = (_made_in_b_behind_views(ra, rb, in_diffs, candidates, walker, made_in_b, b_side)
                                or _carried_by_views(ra, rb, candidates, out_diffs or in_diffs, walker, made_in_b)
                                or _from_walk(ra, rb, candidates, out_diffs or in_diffs, inputs_agree=False))
            elif candidates:
                result.first = (_changed_after_its_pair(ra, rb, tb, _places(candidates), out_diffs or in_diffs, walker,
                                                        b_side, comparer)
                                or _changed_behind_unread_writes(ra, rb, tb, candidates, out_diffs or in_diffs, walker,
                                                                 b_side)
                                or _from_walk(ra, rb, candidates, out_diffs or in_diffs, inputs_agree=False))
            else:
                result.first = _changed_in_between(ra, rb, in_diffs, walker, b_side, by_name)
        else:
            absorbed = absorbed or _absorbed_change(ra, rb, in_diffs, kernel, comparer, walker, b_side, by_name)
            loose_entries.carry(ra, _moved(out_passed), first_entry or loose_entries.started_by(ra, passed, out_passed))
            walker.known(ra)
            b_side.agree(rb, ra["i"], _loose(out_passed))
            _mark_an_unread_update(ra, rb, passed, amplified, walker, seen_regions and not open_regions)

    if sample is not None:
        if result.first is not None:
            sample.diverged()
        if result.inherited_complete:
            for rest in b_side.rest():
                sample.only_b(rest)
        sample.finish((a.header, b.header), stopped_early=not result.inherited_complete)
    result.passed_by_noise = comparer.passed_by_noise
    result.closest_to_noise = comparer.closest
    _count_structure(result, partner, rejected, compiled)
    if result.first is not None:
        result.first = _from_a_loose_entry(_from_an_absorbed_change(_unsure_if_barely_beyond(result.first), absorbed),
                                           first_entry)
    if result.first is None and config.strict_structure and result.structure_count:
        detail = result.structure[0] if result.structure else "see the counts"
        result.first = Divergence("structure", Place(-1, "structure", None, None), None, (), None, True,
                                  f"{result.structure_count} structure difference(s): {detail}")
    return result


# Outputs this far apart (relative) are other quantities, not one value computed otherwise.
_OTHER_QUANTITY = 0.5

def _barely_beyond(d: Divergence) -> bool:
    """`d`'s difference is barely beyond the tolerance (`BARELY_BEYOND` times what it allows): it may be one that
    agreed within it a moment before, a sum of sub-tolerance differences crossing the line, not a change made there."""
    return (d.kind == "output" and d.worst is not None and not d.worst.comparison.nonfinite
            and d.worst.comparison.times_allowed < BARELY_BEYOND)


def _unsure_if_barely_beyond(d: Divergence) -> Divergence:
    """`d`, marked `may_start_earlier` where it is placed by position alone (not an op whose own
    inputs agree and outputs differ) on a difference barely beyond the tolerance: the values that
    agreed before it did so only within the tolerance, and the difference may have been made
    earlier (inside fused kernels whose intermediates nobody saw)."""
    by_value = d.inputs_agree and d.observed is None
    if by_value or d.changed_in_b or d.may_start_earlier or not _barely_beyond(d):
        return d
    assert d.worst is not None  # _barely_beyond: a difference of a tensor
    comparison = d.worst.comparison
    note = (f"{d.note}; the difference is barely beyond the tolerance ({comparison.times_allowed:.2g}x what "
            "it allows): it may have grown from differences below the tolerance, made earlier")
    return replace(d, may_start_earlier=True, note=note)


def _unsure_if_inputs_moved(d: Divergence, passed: list) -> Divergence:
    """`d`, pinned by value, marked `may_start_earlier` where its inputs agree only within the tolerance
    (not bitwise) and its output is barely beyond it: the op may compute exactly as A's and carry a change
    made before it, inside a fused kernel and scaled down there (GPT-2's last residual `add`, 1% off, then
    `ln_f`, which a scale leaves almost unchanged; the `lm_head` after it showed 1.2x)."""
    moved = [c.rel_diff for ta, tb, c in passed if ta.get("fp") != tb.get("fp")]
    if not moved or not _barely_beyond(d) or d.worst is None:
        return d
    note = (f"{d.note}; but its inputs agree only within the tolerance (rel diff up to {max(moved):.2g}) and its "
            f"output is barely beyond it ({d.worst.comparison.times_allowed:.2g}x what it allows): the difference "
            "may come from its inputs, made earlier")
    return replace(d, may_start_earlier=True, note=note)


def _far_apart(diffs: list[TensorDiff]) -> bool:
    return all(not d.comparison.nonfinite and d.comparison.rel_diff > _OTHER_QUANTITY for d in diffs)


def _differing(record: TraceRecord, diffs: list[TensorDiff]) -> list[Tensor]:
    args = {d.arg for d in diffs}
    return [t for t in record.get("out", ()) if t["a"] in args]


def _input_origin(ra: TraceRecord, d: TensorDiff, amplified: Amplified) -> Amplifier | None:
    """The amplifier behind a differing input of `ra`, if its difference is amplified noise."""
    return next((amplified.origin(t) for t in ra.get("in", ()) if t["a"] == d.arg), None)


def _amplified_reached(ra: TraceRecord, rb: TraceRecord, origin: Amplifier, diffs: list[TensorDiff]) -> Divergence:
    """Amplified sub-tolerance noise reaches a compiled region's outputs beyond the tolerance: blame the amplifier."""
    seen = Place.of(ra)
    note = (f"{origin.describe()}; the amplified difference reaches {seen.op} (#{seen.index}), "
            f"a compiled region's output, beyond the tolerance ({_worst(diffs).comparison.describe()})")
    return Divergence(_kind(origin.worst), origin.place, origin.b, (origin.place,), origin.worst, True, note,
                      observed=seen)


def _count_structure(result: DiffResult, partner: array, rejected: int, compiled: bool) -> None:
    """Pairing counts from the alignment itself, so they hold even when reading stopped early."""
    a, b = result.a, result.b
    paired_b = bytearray(len(b))
    for j in partner:
        if j >= 0:
            paired_b[j] = 1
    result.paired = sum(paired_b) - rejected
    result.unpaired_a = len(a) - result.paired
    result.unpaired_b = len(b) - result.paired
    if compiled:
        # Inside compiled code fusion and decompositions change ops by design: only regions count.
        result.structure_count = (
            sum(1 for i, j in enumerate(partner) if j < 0 and a.is_region[i])
            + sum(1 for j in range(len(b)) if not paired_b[j] and b.is_region[j])
        )
    else:
        result.structure_count = result.unpaired_a + result.unpaired_b


def _fed_by_b_only(ra: TraceRecord, rb: TraceRecord, in_diffs: list[TensorDiff], b_side: _BSide, by_name: bool,
                   tolerance_of: Callable[[Tensor], Tolerance]) -> bool:
    """Was a differing input of B's record made by a record only B runs (e.g. an op a compiler pass
    inserted)? A dispatched op; a generated kernel only where B's record is a kernel too (one kernel
    per op) and the kernel computes an op A never computes at its line, or read A's very input (B
    computed it, then changed it): fusion leaves many kernels without a partner, and a compiled
    backward's same-shaped branches (the crossed pairs) are made by such kernels, of ops A runs
    there too, from other values. Where B's record is an op, a kernel counts when it read A's very input
    and wrote the same quantity computed otherwise (a pass's `mul` after a weight gradient's `mm`, fused
    into a kernel, the gradient then read by the eager optimizer)."""
    args = {d.arg for d in in_diffs}
    same_quantity = {d.arg for d in in_diffs if not _far_apart([d])}
    kernels_count = rb["t"] == KERNEL

    def changes(made: _Made, ta: Tensor) -> bool:
        if not made.only_b or made.moves:
            return False
        if made.kernel is None:
            return True
        read_a_value = (kernels_count or ta["a"] in same_quantity) and made.read(ta, tolerance_of(ta))
        return (kernels_count and made.foreign) or read_a_value

    for ta, tb in _pair_tensors(ra.get("in", []), rb.get("in", []), by_name):
        made = b_side.producer(tb) if ta["a"] in args else None
        if made is None:
            continue
        # A record writing exactly what it read (a batch norm's weight of ones, bias of zeros) passes
        # a change on: look behind it, to the records B made the value with.
        if any(changes(m, ta) for m in (b_side.walk_back(tb) if made.moves else [made])):
            return True
    return False


def _absorbed_change(ra: TraceRecord, rb: TraceRecord, in_diffs: list[TensorDiff], kernel: bool, comparer: _Comparer,
                     walker: _Walker, b_side: _BSide, by_name: bool) -> Divergence | None:
    """`ra`'s outputs agree though an input differs beyond the tolerance: B changed a value of A's that
    agreed (with a record only B runs) and `ra` absorbed the change (a small residual branch added to a
    large stream). Where the difference shows again later, barely, this is where it was made. With a
    kernel, inputs read in another shape count too (`in_diffs` leaves them out)."""
    if ra["t"] != OP:
        return None
    in_diffs = in_diffs or (comparer.reshaped_input_diffs(ra, rb, by_name) if kernel else [])
    if not in_diffs:
        return None
    bad = _worst(in_diffs)
    if bad.comparison.nonfinite:
        return None
    ta, tb = _input_pair(ra, rb, bad, by_name)
    made_a = walker.agreed_through_views(ta)
    made_b = b_side.computing_producer(tb) if tb is not None else None
    if made_a is None and made_b is not None and tb is not None:
        return _absorbed_from_unpaired_ops(ra, rb, bad, ta, tb, walker, b_side)
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
    return Divergence(_kind(bad), made_a, made_b.place, (made_a,), bad, False, note, observed=seen)


def _absorbed_from_unpaired_ops(ra: TraceRecord, rb: TraceRecord, bad: TensorDiff, ta: Tensor, tb: Tensor,
                                walker: _Walker, b_side: _BSide) -> Divergence | None:
    """`_absorbed_change` where A made the differing input with ops no record of B is paired with (a
    compiled backward's layer-norm backward and residual `add`, one kernel of B): B's generated kernel
    that made it at the line of such an op is where the value changed. Not an op B runs (an unpaired `mm`
    of B computes A's `mm`: a difference read there is another quantity paired, a crossed gradient), nor
    a difference too large for one value computed otherwise."""
    if bad.comparison.rel_diff >= _OTHER_QUANTITY:
        return None
    candidates = [c.place for c in walker.walk_back([ta]) if not c.moves and not only_moves(c.place.op)]
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
    return Divergence(_kind(bad), at_line[-1], made_b.place, at_line, bad, False, note, observed=seen)


def _from_an_absorbed_change(first: Divergence, absorbed: Divergence | None) -> Divergence:
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
    unsure = absorbed.a.index < first.a.index and (first.may_start_earlier or _barely_beyond(first))
    walked_past_it = (first.observed is not None and absorbed.worst is not None
                      and absorbed.worst.comparison.rel_diff < _OTHER_QUANTITY)
    if not (unsure or walked_past_it):
        return first
    shown = first.observed or first.a
    note = (f"{absorbed.note}; the difference shows beyond the tolerance again at {shown.op} (#{shown.index}) "
            f"at {shown.source}")
    return replace(absorbed, worst=first.worst, note=note, observed=shown)


def _input_pair(ra: TraceRecord, rb: TraceRecord, bad: TensorDiff, by_name: bool) -> tuple[Tensor, Tensor | None]:
    """The differing input `bad` of A's record, and B's tensor paired with it (None if none is)."""
    ta = next(t for t in ra.get("in", []) if t["a"] == bad.arg)
    return ta, next((y for x, y in _pair_tensors(ra.get("in", []), rb.get("in", []), by_name) if x is ta), None)


def _changed_in_between(ra: TraceRecord, rb: TraceRecord, in_diffs: list[TensorDiff], walker: _Walker, b_side: _BSide,
                        by_name: bool) -> Divergence:
    """An input differs although no unpaired op of A produced it.

    Either the value agreed when A's producer made it and B changed it before
    this op read it (an op only B runs, e.g. one a compiler pass inserted), or
    it is a program input that differs from the start.
    """
    bad = _worst(in_diffs)  # the value B changed is the one to show
    ta, tb = _input_pair(ra, rb, bad, by_name)
    made_a = walker.maker_behind_views(ta)
    made_b = b_side.computing_producer(tb) if tb is not None else None
    seen = Place.of(ra)
    if made_a is None:
        note = (f"its input {bad.arg!r} already differs and no recorded op of A produced it: "
                "a program input, parameter or buffer differs between the runs")
        return Divergence(_kind(bad), seen, Place.of(rb), (seen,), bad, False, note, program_input=True)
    if made_b is not None and made_b.place.index != rb["i"]:
        note = (f"the output of {made_a.op} agrees, but B changes it before {seen.op} (#{seen.index}) reads it: "
                f"B runs {made_b.describe()}{made_b.place.at} (#{made_b.place.index}), which A does not")
    else:
        note = f"the output of {made_a.op} agrees, but differs by the time {seen.op} (#{seen.index}) reads it"
    return Divergence(_kind(bad), made_a, made_b.place if made_b else Place.of(rb), (made_a,), bad, False, note,
                      observed=seen)


def _op_read_at_its_line(made: _Made, walker: _Walker, b_side: _BSide, line: str | None = None) -> Place | None:
    """The op of A at B's record `made`'s own line (or at `line`) whose agreed value `made` read (the `mm` a
    pass's `mul` scales, not the `sum` of that `mm` computed at the same line after it)."""
    line = line or made.place.source
    read = (walker.agreed_place(i) for i in b_side.agreed_values_read(made))
    return next((p for p in read if p is not None and p.source == line and not only_moves(p.op)), None)


def _made_in_b_behind_views(ra: TraceRecord, rb: TraceRecord, in_diffs: list[TensorDiff], views: list[_Produced], walker: _Walker,
                            made_in_b: list[_Made], b_side: _BSide) -> Divergence | None:
    """An input differs and only views of A stand between it and values that agree.

    A view cannot change a value, so B changed it, with records only B ran (a
    compiler pass's op or a kernel after the last paired one: GPT-2's `ln_f`
    output scaled by a kernel of its own, read by `lm_head` through views).
    Name the last of them that computes, at A's op of the same line.
    `made_in_b`: B's walk back from the input its record read.
    """
    bad = _worst(in_diffs)
    computing = [m for m in made_in_b if not m.moves]
    if not computing:
        return None
    changed = computing[-1]
    a = (_op_read_at_its_line(changed, walker, b_side) or walker.counterpart(changed.op, changed.place.source)
         or walker.computing_at(changed.place.source))
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
    others = _fused_elsewhere(changed, a, seen, walker, b_side)
    if others:
        note += f"; it fuses ops of other lines too ({', '.join(p.source or '?' for p in others)}): candidates"
    return Divergence(_kind(bad), a, changed.place, (a, *others), bad, False, note, observed=seen)


def _fused_elsewhere(kernel: _Made, named: Place, seen: Place, walker: _Walker, b_side: _BSide) -> tuple[Place, ...]:
    """A's ops at the other source lines a kernel of B fuses (an input gradient's `mm` with a pass's `mul` at
    its line, fused into the attention backward's kernel, named at the attention's line): the change may be
    in any of them. The op whose agreed value the kernel read at that line, else A's latest computing there."""
    if kernel.kernel is None:
        return ()
    found: list[Place] = []
    for line in sorted(kernel.fused_lines - {named.source}):
        # Else the latest before the op where the difference shows: the one whose value reached it (backward
        # runs the layers in reverse, so an earlier record at that line is another layer's).
        place = (_op_read_at_its_line(kernel, walker, b_side, line)
                 or walker.agreed_computing_at(line, before=seen.index))
        if place is not None and place != named and place not in found:
            found.append(place)
    return tuple(found)


def _carried_by_views(ra: TraceRecord, rb: TraceRecord, views: list[_Produced], diffs: list[TensorDiff], walker: _Walker,
                      made_in_b: list[_Made]) -> Divergence | None:
    """Only views of A stand between a value that agreed within the tolerance and `ra`, where it
    differs beyond it, and B made it with no record of its own (`made_in_b`: B's walk back from the
    input it read). A view cannot change a value: the difference grew from below the tolerance. Name
    the op that computed the value the views carry. Not when B computed its input with records of
    its own: then B's record read another quantity (a kernel of a decomposition reads the step before
    it, not A's input), and the comparison of inputs says nothing."""
    if any(m.only_b and not m.moves for m in made_in_b):
        return None
    maker = next((m for m in (walker.agreed_maker(v.reads) for v in views) if m is not None), None)
    if maker is None or only_moves(maker.op):
        return None
    seen = Place.of(ra)
    note = (f"only views of A ({', '.join(v.place.op for v in views)}) stand between {maker.op} (#{maker.index}), "
            f"whose output agreed within the tolerance, and {seen.op} (#{seen.index}), where the difference "
            "shows; a view cannot change a value: it grew from a difference below the tolerance, made there "
            "or before it")
    worst = _worst(diffs)
    return Divergence(_kind(worst), maker, Place.of(rb), (maker, *(v.place for v in views)), worst, False, note,
                      observed=seen, may_start_earlier=True)


def _out_pair(ra: TraceRecord, rb: TraceRecord, worst: TensorDiff) -> Tensor | None:
    """B's output tensor compared with A's differing output `worst` (paired as the comparison pairs them)."""
    return next((y for x, y in _pair_tensors(ra.get("out", []), rb.get("out", []), True) if x["a"] == worst.arg), None)


def _places(candidates: list[_Produced]) -> tuple[Place, ...]:
    return tuple(c.place for c in candidates)


def _changed_after_its_pair(ra: TraceRecord, rb: TraceRecord, tb: Tensor | None, candidates: tuple[Place, ...],
                            diffs: list[TensorDiff], walker: _Walker, b_side: _BSide,
                            comparer: _Comparer | None = None, through_loose: bool = False,
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
            redone = _candidate_value_read(made, candidates, ra["i"], walker, comparer) if comparer else None
            if redone is not None:
                seen = Place.of(ra)
                note = (f"B computes the value of {redone.op} (#{redone.index}) as A does, then changes it: it runs "
                        f"{made.describe()} (#{made.place.index}) at its line, an op A does not run there, reading "
                        f"that value, on its way to {seen.op} (#{seen.index}), where the difference shows")
                return Divergence(_kind(_worst(diffs)), redone, made.place, (redone,), _worst(diffs), False, note,
                                  observed=seen, changed_in_b=True)
            continue
        if not made.only_b:
            continue
        # The op of A whose agreed value it read, at its line (the `mm` before a pass's `mul`), else the
        # latest op of A at its line whose output agreed. Not where B recomputes at that line: there reading
        # the value of one op (`addmm`) is a step of recomputing the next (`gelu(fc1(x))`, one line).
        read_there = None if made.place.source in recomputed else _op_read_at_its_line(made, walker, b_side)
        a = read_there or walker.agreed_computing_at(made.place.source)
        if a is None or a.index > _first_computing_floats(candidates, walker).index:
            continue
        # After a recomputation, a record reading the recomputed value and writing another changes it.
        changes_recomputed = not b_side.recomputes(made) and b_side.read_a_recomputed_value_of(made, a.index)
        if made.place.source in recomputed and not changes_recomputed:
            continue
        seen = Place.of(ra)
        note = (f"{a.op} (#{a.index}) agrees with the record of B paired with it, but B goes on computing at its "
                f"line: it runs {made.describe()} (#{made.place.index}), which A does not, on its way to "
                f"{seen.op} (#{seen.index}), where the difference shows")
        worst = _worst(diffs)
        read_its_value = b_side.read_the_value_of(made, a.index)
        if read_its_value or changes_recomputed:
            # It read that op's very value (agreed) and wrote another at its line: B changed it there. Not
            # a piece of the op's decomposition or recomputation: those read the op's inputs.
            note += (f"; it read the value of {a.op} that agreed: B changed it there" if read_its_value
                     else f"; it read B's recomputation of {a.op}'s value, which agreed: B changed it there")
            # What it wrote is not what it read: the change is made there, however small it still is where it shows.
            changed = not set(made.wrote) & set(made.read_contents)
            return Divergence(_kind(worst), a, made.place, (a,), worst, False, note, observed=seen, changed_in_b=changed)
        note += "; candidates: this op, then A's ops without a counterpart after it"
        return Divergence(_kind(worst), a, made.place, (a, *candidates), worst, False, note,
                          observed=seen)
    return None


def _first_computing_floats(candidates: tuple[Place, ...], walker: _Walker) -> Place:
    """The oldest candidate that makes floating values: the walk back also reaches the integer indices a
    gather reads (an embedding's position ids, computed in the forward), which no floating change came
    through, and an op of A changed after them is no less upstream of the difference."""
    for place in candidates:
        outputs = walker.outputs_of(place.index)
        if not outputs or any(not _INTEGRAL.match(t.get("dt", "")) for t in outputs):
            return place
    return candidates[0]


def _candidate_value_read(made: _Made, candidates: tuple[Place, ...], seen: int, walker: _Walker,
                          comparer: _Comparer) -> Place | None:
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
        produced = walker.unpaired(place.index)
        if produced is None or (made.backward and not produced.backward):
            continue
        for t in produced.outputs:
            if not _fingerprint_of(t).get("l1"):
                continue  # all zeros: any zeros read would match
            tolerance = comparer.tolerance(t["dt"], place.op, place.module, t.get("dev", "cpu"))
            if made.read(t, tolerance):
                return place
    return None


# Dtypes of indices and masks: no floating difference comes through them.
_INTEGRAL = re.compile(r"(u?int\d*|bool)$")

# A value this many times its absolute tolerance (max |x|) is no rounding noise near zero.
_FAR_FROM_ZERO = 10.0


def _loose(passed: list[tuple[Tensor, Tensor, TensorComparison]]) -> list[Tensor]:
    """B's tensors (of agreeing pairs) that agreed only within the absolute tolerance while far from zero:
    a coherent relative change larger than rtol (a 1% change of a variance whose values are ~5e-4, with
    atol 1e-5), not noise. They agree by the tolerance's rule; a walk back may still pass through them."""
    return [tb for ta, tb, c in passed if c.rel_diff > c.tolerance.rtol and c.tolerance.atol > 0
            and abs(_fingerprint_of(ta).get("max", 0.0)) > _FAR_FROM_ZERO * c.tolerance.atol]


def _mark_an_unread_update(ra: TraceRecord, rb: TraceRecord, passed: list, amplified: Amplified, walker: _Walker,
                           outside_regions: bool) -> None:
    """A paired record whose writes were not fingerprinted (AdamW's foreach step) and whose inputs agree
    only within the tolerance, as an amplifier's do (amplified.amplifies): what it wrote is amplified
    noise until shown otherwise, as for AdamW's one-tensor ops, whose outputs are compared. Where it read
    a value changed coherently by more than rtol within the absolute tolerance (_loose), remember who made
    it: rounding does not do that (1e-7 relative on a clean run, 1e-4 from a 1% change of a bias gradient)."""
    unread = [t for t in ra.get("out", ()) if t.get("unread")]
    why = amplifies(ra, rb, passed, outside_regions) if unread and passed else None
    if why is None:
        return
    ta, tb, comparison = max(passed, key=lambda p: p[2].rel_diff)
    worst = TensorDiff("input", ta["a"], ta["dt"], tuple(ta["sh"]), ta["fp"], tb["fp"], comparison)
    # An earlier update's coherent change read again (AdamW's `div_` reading `sqrt` of the state `addcmul_`
    # wrote) is still that change: keep its maker.
    earlier = next((o.loose_maker for o in map(amplified.origin, ra.get("in", ())) if o and o.loose_maker), None)
    maker = earlier or (walker.maker(ta) if _loose([(ta, tb, comparison)]) else None)
    amplified.mark(unread, Amplifier(Place.of(ra), Place.of(rb), worst, f"{why}; its writes are not fingerprinted",
                                     unread=True, loose_maker=maker), observed=False)


def _changed_before_an_unread_update(ra: TraceRecord, rb: TraceRecord, carried: list[TensorDiff], origins: list[Amplifier],
                                     by_name: bool, walker: _Walker, b_side: _BSide) -> Divergence | None:
    """`ra`'s inputs differ only by amplification, from a record whose writes were not fingerprinted (see
    _mark_an_unread_update): unless B changed, with a record only B runs, a value that agreed only
    within the absolute tolerance on the way to that record (_changed_behind_unread_writes)."""
    for d, origin in zip(carried, origins):
        if not origin.unread:
            continue
        ta, tb = _input_pair(ra, rb, d, by_name)
        found = _changed_behind_unread_writes(ra, rb, tb, walker.walk_back([ta]), [d], walker, b_side)
        if found is not None:
            return found
        if origin.loose_maker is not None:
            maker, seen = origin.loose_maker, Place.of(ra)
            rel = origin.worst.comparison.rel_diff
            note = (f"{origin.place.op} (#{origin.place.index}), whose writes are not fingerprinted, read the value "
                    f"{maker.op} (#{maker.index}) made changed by more than rtol ({rel:.3g}), within the absolute "
                    f"tolerance: a coherent change, not rounding; its update carried it "
                    f"to {seen.op} (#{seen.index}), where the difference shows")
            return Divergence(_kind(d), maker, None, (maker, origin.place), d, False, note, observed=seen,
                              may_start_earlier=True)
    return None


def _changed_behind_unread_writes(ra: TraceRecord, rb: TraceRecord, tb: Tensor | None, candidates: list[_Produced],
                                  diffs: list[TensorDiff], walker: _Walker, b_side: _BSide) -> Divergence | None:
    """A's walk back reached a record whose writes were not fingerprinted (AdamW's foreach step on CUDA
    writes the weights in place): the values it read agreed, maybe only within the absolute tolerance (small
    gradients, 1% off), and its update (m / sqrt(v)) made that difference visible. Where B changed such a
    value by a record only B runs, reading A's agreed value at its line, name that record's op."""
    if tb is None or not any(c.unread for c in candidates):
        return None
    found = _changed_after_its_pair(ra, rb, tb, _places(candidates), diffs, walker, b_side, through_loose=True,
                                    through_updates=True)
    if found is None or not found.changed_in_b:
        return None
    return replace(found, note=f"{found.note}; the values in between agreed only within the absolute tolerance "
                               f"(small values, changed by more than rtol relative) until an update whose writes "
                               f"are not fingerprinted ({candidates[-1].place.op}) made it visible")


def _changed_below_the_absolute_tolerance(ra: TraceRecord, rb: TraceRecord, passed: list, out_diffs: list[TensorDiff],
                                          walker: _Walker, b_side: _BSide) -> Divergence | None:
    """An op whose inputs agree only within the absolute tolerance and whose outputs differ (taken for
    amplified noise): where B made such an input, far from zero, by changing a value that agreed at the
    line of an op of A (a pass's `mul` after a variance's `mean`, with one kernel per op), name that op."""
    for tb in _loose(passed):
        found = _changed_after_its_pair(ra, rb, tb, (Place.of(ra),), out_diffs, walker, b_side, through_loose=True)
        if found is not None and found.changed_in_b:
            return replace(found, note=f"{found.note}; the values in between agreed only within the absolute "
                                       f"tolerance (small values, changed by more than rtol relative)")
    return None


def _shown_by_a_move(ra: TraceRecord, rb: TraceRecord, passed: list, diffs: list[TensorDiff], walker: _Walker) -> Divergence:
    """A value-preserving op's outputs differ while its inputs agree within the tolerance over the whole
    tensor: the difference was made before it. Name the ops of A that made its inputs (not pinned)."""
    seen, worst = Place.of(ra), _worst(diffs)
    makers = tuple(dict.fromkeys(m for m in (walker.maker_behind_views(ta) for ta, _, _ in passed) if m is not None))
    note = (f"{seen.op} only moves values: its input already held this difference, within the tolerance over "
            f"the whole tensor")
    if not makers:
        return Divergence(_kind(worst), seen, Place.of(rb), (seen,), worst, False,
                          f"{note}; no recorded op of A made that input", may_start_earlier=True)
    return Divergence(_kind(worst), makers[-1], None, makers, worst, False, f"{note}; named: the op that made it",
                      observed=seen, may_start_earlier=True)


def _made_only_in_b(ra: TraceRecord, rb: TraceRecord, diffs: list[TensorDiff], walker: _Walker, b_side: _BSide) -> Divergence | None:
    """A compiled region's output differs and every op of A behind it agrees with its partner in B.

    Then B changed the value after its last paired op: ops only B ran between
    that op and the region's exit (a compiler pass's op on the graph's last
    value, a kernel writing it). Name the last of them that computes, at its
    own source line, and A's op that corresponds to it: the same op at the
    same line, else A's op whose output B changed.
    """
    worst = _worst(diffs)
    ta = next(t for t in ra.get("out", ()) if t["a"] == worst.arg)
    tb = next((t for t in rb.get("out", ()) if t["a"] == worst.arg), None)
    made = b_side.walk_back(tb) if tb is not None else []
    if not made:
        return None
    computing = [m for m in made if not m.moves]
    changed = (computing or made)[-1]
    made_a = walker.agreed_value(ta)
    a = walker.counterpart(changed.op, changed.place.source) or made_a
    seen = Place.of(ra)
    if a is None:
        return None
    what = f"the output of {made_a.op} (#{made_a.index}) agrees" if made_a is not None else "every op of A agrees"
    note = (f"{what}, but B changes it before {seen.op} (#{seen.index}) returns it: B runs "
            f"{changed.describe()} at {changed.place.source} (#{changed.place.index}), which A does not")
    if len(computing) > 1:
        note += f" ({len(computing)} such ops in B; named: the last of them)"
    return Divergence(_kind(worst), a, changed.place, (a,), worst, False, note, observed=seen)


def _from_walk(ra: TraceRecord, rb: TraceRecord, candidates: list[_Produced], diffs: list[TensorDiff], inputs_agree: bool) -> Divergence:
    worst = _worst(diffs)
    seen = Place.of(ra)
    if not candidates:
        note = (f"its output {worst.arg!r} differs, but no op of A without a counterpart in B made it: "
                "the difference comes from values this comparison cannot see")
        return Divergence(_kind(worst), seen, Place.of(rb), (seen,), worst, inputs_agree, note)
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
    return Divergence(_kind(worst), reported, Place.of(rb), places, worst, inputs_agree, note, observed=seen)


def _which(reported: Place, places: tuple[Place, ...]) -> str:
    if reported == places[-1]:
        return "the last of them"
    return f"the last of them that computes ({places[-1].op} after it only moves or widens values)"

