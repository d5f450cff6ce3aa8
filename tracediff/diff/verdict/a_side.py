"""Trace A's producers as the walk passes them: who made each value, whether it agreed with B's, and the
walk back from a differing value through A's records that no record of B pairs with (the candidates).

Dataflow keys a value by (tensor id, version), dataflow.py; a view read after its base was written
resolves to that write.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from tracediff.diff.amplified import Amplified
from tracediff.diff.garbage import Garbage
from tracediff.diff.place import Place
from tracediff.diff.precision import only_moves, preserves_values
from tracediff.diff.verdict.dataflow import (
    VIEW_CHAIN_LIMIT,
    WALK_LIMIT,
    Key,
    PackedTensor,
    Ref,
    filed_keys,
    pack,
    put_bounded,
    reads_of,
    resolve,
    unpack,
    value_ref,
)
from tracediff.op_names import base_op
from tracediff.trace.schema import Tensor, TraceRecord


@dataclass(frozen=True, slots=True)
class Produced:
    """What the walk back needs of a record: where it is, what it read."""

    place: Place
    reads: tuple[Ref, ...]
    candidate: bool
    uninit: bool
    moves: bool = False  # only moves or exactly widens values (view, clone, bf16 -> float32): never the one blamed
    outputs: tuple[PackedTensor, ...] = ()  # a candidate's output tensors (fingerprinted), packed: `outputs_of`
    # Paired with B's record, but what it wrote was not fingerprinted (an in-place foreach op's writes).
    unread: bool = False
    backward: bool = False  # run by autograd's backward

    def output_tensors(self) -> tuple[Tensor, ...]:
        return tuple(map(unpack, self.outputs))


class ASide:
    """Trace A's producers: of values not known to agree (walk back), and of values that agreed."""

    def __init__(self, garbage: Garbage, amplified: Amplified) -> None:
        self.garbage = garbage
        self.amplified = amplified
        self.unknown_producers: OrderedDict[Key, Produced] = OrderedDict()
        self.agreed: OrderedDict[Key, Place] = OrderedDict()
        self.shown_by_view: OrderedDict[Key, Ref] = OrderedDict()  # an agreed view's value -> the value it shows

    def unknown(self, record: TraceRecord, candidate: bool, compared: bool = False) -> None:
        """`compared`: its outputs were compared (what amplification they carry is already marked)."""
        outs = record.get("out", ())
        entry = Produced(Place.of(record), reads_of(record), candidate, any(t.get("uninit") for t in outs),
                          preserves_values(record), tuple(pack(t) for t in outs if t.get("fp")) if candidate else (),
                          backward=bool(record.get("bw")))
        if not compared:
            self.amplified.carry(record)  # made from an amplified value, unseen: amplified too
        for t in outs:
            for key in filed_keys(record, t):
                self.agreed.pop(key, None)
                put_bounded(self.unknown_producers, key, entry)

    def known(self, record: TraceRecord) -> None:
        """The record's outputs agree with B's; uninitialized ones stay suspects."""
        place = Place.of(record)
        carried = self.amplified.origin_of_reads(record)
        self.amplified.forget(record)
        if carried is not None and carried.loose_maker is not None:
            # Agreeing now, but made from an update's coherent change (AdamW's `sqrt` of the state its
            # foreach `addcmul_` wrote): a later update reading it still carries that change's maker.
            self.amplified.mark([t for t in record.get("out", ()) if t.get("fp")], carried, observed=False)
        reads = reads_of(record)
        shows_a_view = len(reads) == 1 and preserves_values(record)
        for t in record.get("out", ()):
            for key in filed_keys(record, t):
                self.unknown_producers.pop(key, None)
                if t.get("uninit"):
                    put_bounded(self.unknown_producers, key, Produced(place, reads, True, True))
                elif self.garbage.holds(t):  # a view of uninitialized memory, not compared: walk on to the allocation
                    put_bounded(self.unknown_producers, key, Produced(place, reads, False, False))
                elif t.get("unread"):  # written, not fingerprinted (AdamW's foreach step): made here, unseen
                    self.agreed.pop(key, None)
                    put_bounded(self.unknown_producers, key, Produced(place, reads, True, False, unread=True))
                else:
                    put_bounded(self.agreed, key, place)
                    if shows_a_view:
                        put_bounded(self.shown_by_view, key, reads[0])

    def agreed_value(self, t: Tensor) -> Place | None:
        """The record of A that made `t`'s value, if that value agreed with B's."""
        return self.agreed.get(resolve(value_ref(t), self.agreed, self.unknown_producers))

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
        return entry.output_tensors() if entry is not None else ()

    def unpaired(self, index: int) -> Produced | None:
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
        refs = [value_ref(t)]
        for _ in range(VIEW_CHAIN_LIMIT):
            key = resolve(refs[0], self.agreed, self.unknown_producers)
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
        return self._maker_behind_views(value_ref(t))

    def _maker_behind_views(self, ref: Ref) -> Place | None:
        last_agreed = None
        for _ in range(VIEW_CHAIN_LIMIT):
            key = resolve(ref, self.agreed, self.unknown_producers)
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
        ref = value_ref(t)
        for _ in range(VIEW_CHAIN_LIMIT):
            key = resolve(ref, self.agreed, self.unknown_producers)
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
            place = self.agreed.get(resolve(ref, self.agreed, self.unknown_producers))
            if place is not None:
                return place
        return None

    def walk_back(self, start: list[Tensor]) -> list[Produced]:
        """Candidate records upstream of the `start` tensors, oldest first."""
        found: dict[int, Produced] = {}
        visited: set[int] = set()
        stack = [value_ref(t) for t in start]
        while stack and len(visited) < WALK_LIMIT:
            entry = self.unknown_producers.get(resolve(stack.pop(), self.unknown_producers, self.agreed))
            if entry is None or entry.place.index in visited:
                continue
            visited.add(entry.place.index)
            if entry.candidate:
                found[entry.place.index] = entry
            stack.extend(entry.reads)
        return [found[i] for i in sorted(found)]


def places_of(candidates: list[Produced]) -> tuple[Place, ...]:
    return tuple(c.place for c in candidates)
