"""Trace B streamed in step with A: its alignable records, who made each of its values (`Made`), which of
them agreed with A's, and the walk back in B from a value to the records only B runs that made it.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from tracediff.config import Tolerance
from tracediff.diff.compare import compare_fingerprints
from tracediff.diff.place import Place, interned
from tracediff.diff.precision import preserves_values, rewrites_an_input
from tracediff.diff.skeleton import alignable, chain_op, op_line_key
from tracediff.diff.verdict.dataflow import (
    WALK_LIMIT,
    Content,
    Key,
    PackedTensor,
    Ref,
    content_of,
    filed_keys,
    fingerprint_of,
    pack,
    put_bounded,
    reads_of,
    ref_to,
    resolve,
    unpack,
    value_key,
    value_ref,
)
from tracediff.trace.reader import Trace
from tracediff.trace.schema import KERNEL, REGION, Tensor, TraceRecord, without_sketch


@dataclass(frozen=True, slots=True)
class Made:
    """Who made a value in trace B (for naming an op only B runs), and what it read (for walking back)."""

    place: Place
    kernel: str | None
    fused: tuple[str, ...]
    op: str | None = None  # the op it computes (a kernel: the last op it fuses)
    reads: tuple[Ref, ...] = ()
    moves: bool = False  # only moves, exactly widens or rewrites values it read: never the one named
    only_b: bool = False  # an alignable record the aligner gave no partner in A: an op only B runs
    foreign: bool = False  # only B computes its op at its line (a compiler pass inserted it)
    read_values: tuple[PackedTensor, ...] = ()  # an op only B runs, or foreign: the tensors it read (fingerprinted)
    wrote: tuple[Content, ...] = ()  # an op only B runs: the contents (`content_of`) of what it wrote
    read_contents: tuple[Content, ...] = ()  # an op only B runs: the contents of what it read
    fused_lines: frozenset[str] = frozenset()  # a kernel: the source lines of the ops it fuses
    unread: bool = False  # wrote values in place it did not return, not fingerprinted (AdamW's foreach step)
    backward: bool = False  # run by autograd's backward (a compiled backward's kernel)

    def read(self, value: Tensor, tolerance: Tolerance) -> bool:
        """Did this record read `value` (a tensor of A's), within `tolerance`? A dispatched op's input of
        A's shape is compared with its sketch too: its elements are in A's order, and the order-free
        statistics alone miss a change that keeps the norms (a tied embedding's gradient 3e-4 off, its l2
        within 3e-6). A kernel's buffer is compared by those statistics alone (`without_sketch`)."""
        mine = without_sketch(fingerprint_of(value))
        for t in map(unpack, self.read_values):
            in_order = self.kernel is None and t.get("sh") == value.get("sh")
            theirs = fingerprint_of(t)
            if compare_fingerprints(fingerprint_of(value) if in_order else mine,
                                    theirs if in_order else without_sketch(theirs), tolerance).ok:
                return True
        return False

    def describe(self) -> str:
        if self.kernel:
            return f"kernel {self.kernel} ({', '.join(self.fused)})"
        return self.place.op


def _fused_lines(record: TraceRecord) -> frozenset[str]:
    """A kernel's fused ops' source lines (interned); the one empty set for a record fusing none (a set of its own
    per record took 200 bytes of each of the walk's remembered producers)."""
    lines = [sys.intern(src) for f in record.get("fuses") or () if (src := f.get("src"))]
    return frozenset(lines) if lines else _NO_LINES


_NO_LINES: frozenset[str] = frozenset()


class BSideView(Protocol):
    """B's side as the walk and its rules use it: a `BSide`, or one in another process (remote_b_side.py)."""

    index: int
    current: TraceRecord | None

    def advance_to(self, j: int) -> Iterator[TraceRecord]: ...
    def rest(self) -> Iterator[TraceRecord]: ...
    def agree(self, record: TraceRecord, a_index: int, loose_args: Collection[str | None] = ()) -> None: ...
    def stop_filing(self) -> None: ...
    def producer(self, t: Tensor) -> Made | None: ...
    def computing_producer(self, t: Tensor) -> Made | None: ...
    def walk_back(self, start: Tensor, through_loose: bool = False, through_updates: bool = False) -> list[Made]: ...
    def recomputes(self, made: Made) -> bool: ...
    def read_a_recomputed_value_of(self, made: Made, a_index: int) -> bool: ...
    def read_the_value_of(self, made: Made, a_index: int) -> bool: ...
    def agreed_values_read(self, made: Made) -> list[int]: ...
    def close(self, check: bool = True) -> None: ...


class BRecords:
    """Trace B's alignable records, read in step with A: the current one, and those passed over on the way."""

    def __init__(self, records: Iterator[TraceRecord]) -> None:
        self._records = records
        self.index = -1
        self.current: TraceRecord | None = None

    def advance_to(self, j: int) -> Iterator[TraceRecord]:
        """Move to B's alignable record `j`; yields the ones passed over (unpaired)."""
        while self.index < j:
            self.current = next(self._records)
            self.index += 1
            if self.index < j:
                yield self.current

    def rest(self) -> Iterator[TraceRecord]:
        """B's alignable records after the current one (all unpaired once A is done)."""
        yield from self._records


class BSide(BRecords):
    """Trace B streamed in step with A: its alignable records, and who made each value."""

    def __init__(self, path: Any, paired: bytearray, a_op_lines: set[int]) -> None:
        self.producers: OrderedDict[Key, Made] = OrderedDict()
        # The same values by content: inductor's wrapper reads a kernel's buffer through
        # `reinterpret_tensor`, a new tensor no dispatched op made.
        self.by_content: OrderedDict[Content, tuple[Key, Made]] = OrderedDict()
        # Values read that no record made, and the key of the last value written with their content.
        self.read_as: OrderedDict[Key, Key] = OrderedDict()
        self._paired = paired  # per alignable record of B: does it have a partner in A?
        self._a_op_lines = a_op_lines  # the ops A computes, by line (`op_line_key`)
        self.agreed: OrderedDict[Key, int] = OrderedDict()  # B's values known to agree with A's: A's record
        self.agreed_contents: OrderedDict[Content, int] = OrderedDict()  # the same, by content
        # Of those, values that agreed only within the absolute tolerance, far from zero (see loosely_agreeing).
        self.loose: OrderedDict[Key, None] = OrderedDict()
        super().__init__(self._alignable(Trace(path)))
        # Whether A computes an op at a line (`op_line_key`), by the op's and line's names: a trace has few of them.
        self._foreign: dict[tuple[str | None, str | None], bool] = {}
        # The last record streamed that wrote values, and their contents (`content_of`), which `agree` files again.
        self._written: tuple[TraceRecord | None, list[Content | None]] = (None, [])
        self._filing = True  # until `stop_filing`

    def stop_filing(self) -> None:
        """Stop filing who made each value: the first divergence is found, and no rule asks any more."""
        self._filing = False

    def _alignable(self, trace: Trace) -> Iterator[TraceRecord]:
        count = 0
        for record in trace:
            is_alignable = alignable(record)
            if not self._filing:
                if is_alignable:
                    count += 1
                    yield record
                continue
            outs = record.get("out", ())
            for t in record.get("in", ()):
                self._note_read(t)
            if outs and record["t"] != REGION:  # a region's exit only shows values its ops made
                only_b = is_alignable and not self._paired[count]
                foreign = self._is_foreign(record)
                made = Made(Place.of(record), interned(record.get("name")) if record["t"] == KERNEL else None,
                             tuple(sys.intern(f["op"]) for f in record.get("fuses") or ()),
                             interned(chain_op(record)), reads_of(record),
                             preserves_values(record) or rewrites_an_input(record), only_b=only_b, foreign=foreign,
                             read_values=tuple(pack(t) for t in record.get("in", ()) if t.get("fp"))
                             if only_b or foreign else (),
                             wrote=tuple(c for c in map(content_of, outs) if c is not None) if only_b else (),
                             read_contents=tuple(c for c in map(content_of, record.get("in", ())) if c is not None)
                             if only_b else (),
                             fused_lines=_fused_lines(record),
                             unread=any(t.get("unread") for t in outs), backward=bool(record.get("bw")))
                contents = [content_of(t) for t in outs]
                self._written = (record, contents)
                for t, content in zip(outs, contents):
                    for key in filed_keys(record, t):
                        put_bounded(self.producers, key, made)
                    if content is not None:
                        put_bounded(self.by_content, content, (value_key(t), made))
            if is_alignable:
                count += 1
                yield record

    def _is_foreign(self, record: TraceRecord) -> bool:
        """Does only B compute this record's op at its line (`op_line_key` not among A's)?"""
        names = (chain_op(record), record.get("src"))
        foreign = self._foreign.get(names)
        if foreign is None:
            foreign = self._foreign[names] = op_line_key(record) not in self._a_op_lines
        return foreign

    def _note_read(self, t: Tensor) -> None:
        """A tensor read that no record made (inductor's `reinterpret_tensor` of a kernel's buffer,
        passed to an extern `mm`): remember whose content it holds, for the walk back."""
        if t.get("fp") is None or value_key(t) in self.read_as or resolve(value_ref(t), self.producers) in self.producers:
            return  # the first read is the one closest to the write (a later one may find its own copy)
        content = content_of(t)
        if content is not None and content in self.by_content:
            put_bounded(self.read_as, value_key(t), self.by_content[content][0])

    def agree(self, record: TraceRecord, a_index: int, loose_args: Collection[str | None] = ()) -> None:
        """B's `record` was paired with A's record `a_index`, whose outputs agree: so do its outputs.
        `loose_args`: the arguments of those that agreed only within the absolute tolerance (loosely_agreeing)."""
        outs = record.get("out", ())
        written, contents = self._written
        if written is not record:  # filed when it was streamed, unless it wrote none (a region)
            contents = [content_of(t) for t in outs]
        for t, content in zip(outs, contents):
            if t.get("unread"):  # written, never fingerprinted: not known to agree
                continue
            for key in filed_keys(record, t):
                put_bounded(self.agreed, key, a_index)
                if t.get("a") in loose_args:
                    put_bounded(self.loose, key, None)
            # A value that agreed only loosely is no evidence that a record writing its content recomputes A's
            # value (a pass's `mul` of a small gradient, then a view of it paired and agreeing within atol).
            if content is not None and t.get("a") not in loose_args:
                put_bounded(self.agreed_contents, content, a_index)

    def recomputes(self, made: Made) -> bool:
        """Does B's record `made` (one only B runs) write exactly a value that agreed with one of A's? Then it
        recomputes that value (inductor recomputes a forward `gelu` inside a compiled backward)."""
        return any(content in self.agreed_contents for content in made.wrote)

    def read_a_recomputed_value_of(self, made: Made, a_index: int) -> bool:
        """Did B's record `made` read a value holding exactly what A's record `a_index` wrote (a value B
        recomputed: no key of B's agreed with it, its content did)?"""
        return any(self.agreed_contents.get(content) == a_index for content in made.read_contents)

    def read_the_value_of(self, made: Made, a_index: int) -> bool:
        """Did B's record `made` read a value that agreed with the output of A's record `a_index`?"""
        return a_index in self.agreed_values_read(made)

    def agreed_values_read(self, made: Made) -> list[int]:
        """The records of A whose outputs agreed with values B's record `made` read."""
        found = (self.agreed.get(resolve(ref, self.agreed, self.producers)) for ref in made.reads)
        return [a_index for a_index in found if a_index is not None]

    def producer(self, t: Tensor) -> Made | None:
        """The record of B that made `t`'s value (through a view: the last write to its base; a tensor no
        record made, such as inductor's `reinterpret_tensor` of a kernel's buffer returned as a gradient:
        the last record writing its content)."""
        key = resolve(value_ref(t), self.producers)
        if key not in self.producers:
            key = self.read_as.get(key, key)
        return self.producers.get(key)

    def computing_producer(self, t: Tensor) -> Made | None:
        """`producer(t)`, or where that record writes exactly what it read (a detach, a bias `add` of zeros
        after a pass's `mul`), the last record behind it that computes: the one that made the value."""
        made = self.producer(t)
        if made is not None and made.moves:
            made = next((m for m in reversed(self.walk_back(t)) if not m.moves), None)
        return made

    def walk_back(self, start: Tensor, through_loose: bool = False,
                  through_updates: bool = False) -> list[Made]:
        """The records of B that made the value of `start` (a tensor) from values known to agree, oldest first.

        These ran only in B (no record of A agreed with them): a compiler pass's
        inserted op, a kernel writing a value after the last paired op. `through_loose`:
        values that agreed only within the absolute tolerance (loosely_agreeing) do not stop the walk;
        nor, with `through_updates`, do records whose writes were not fingerprinted (AdamW's
        foreach step): behind those lie a whole backward's loosely agreeing gradients.
        """
        found: dict[int, Made] = {}
        first = resolve(value_ref(start), self.producers, self.agreed)
        content = content_of(start)
        if first not in self.producers and first not in self.agreed and content is not None and content in self.by_content:
            first = self.by_content[content][0]  # a tensor no record made: the last one writing its content
        stack = [ref_to(first)]
        while stack and len(found) < WALK_LIMIT:
            key = resolve(stack.pop(), self.producers, self.agreed)
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

    def close(self, check: bool = True) -> None:
        """Nothing to end here (a `RemoteBSide` ends its process)."""
