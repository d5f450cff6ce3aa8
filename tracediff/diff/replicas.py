"""Replica drift: within one distributed run, do the values every rank must hold alike stay alike?

DDP keeps a copy of the model on every rank: the parameters are broadcast at
start, the gradients all-reduced, and every rank then takes the same optimizer
step. Activations differ (each rank sees its own batch), the replicas must not.
Rank 0's trace is aligned with every other rank's (diff/align.py) and both are
walked together, following which values are *replicated*:

- a collective that gives every rank of the world the same result (all-reduce,
  broadcast, all-gather) makes one; over a subgroup it does not;
- an op whose inputs are all replicated, given the same other arguments on both
  ranks (the record's `sa`), makes one: `p.add_(grad, alpha=-lr)` after the
  all-reduce, but not `x[rank]`;
- an op reading no replicated input (a creation, a random draw, data from the
  program) makes one where both ranks got the same result, and is never blamed.

The replicas part where a replicated value differs between the ranks: at an op
whose replicated inputs agree and whose output differs, or where a replicated
value is read that an op only one rank ran (`if rank == 1: p.add_(noise)`), or a
collective, left different. Differences are judged by the dtype's tolerance, not a
device's looser one (CUDA's is for eager against compiled kernels): ranks run the
same kernels on the same inputs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tracediff.config import Config
from tracediff.diff.compare import compare_fingerprints
from tracediff.diff.engine import aligned_skeletons
from tracediff.diff.place import draws_random, read_inputs
from tracediff.diff.skeleton import alignable
from tracediff.op_names import base_op, is_collective
from tracediff.outcome import Site
from tracediff.trace.reader import Trace
from tracediff.trace.schema import KERNEL, OP, Tensor, TraceRecord

# Collectives after which every rank of their group holds the same tensor.
_REPLICATING = frozenset({
    "c10d::allreduce", "c10d::allreduce_coalesced", "c10d::broadcast", "c10d::allgather",
    "c10d::_allgather_base", "c10d::allgather_coalesced", "c10d::allgather_into_tensor_coalesced",
    "_c10d_functional::all_reduce", "_c10d_functional::all_reduce_coalesced", "_c10d_functional::broadcast",
    "_c10d_functional::all_gather_into_tensor", "_c10d_functional::all_gather_into_tensor_out",
    "_c10d_functional::all_gather_into_tensor_coalesced", "_c10d_functional_autograd::all_gather_into_tensor",
})
_WAIT = "_c10d_functional::wait_tensor"


@dataclass(frozen=True)
class Drift:
    """Where the replicas of rank `base` (rank 0, or the lowest rank of the set) and `rank` first part."""

    rank: int  # the rank compared with rank `base`
    on_rank: int  # whose record `site` is: rank `base`'s, or `rank`'s for an op only it ran
    site: Site
    path: str | None
    how: str  # "computed" (replicated inputs agree, outputs do not), "alone" (one rank ran it), "written" (read later)
    why: str
    rel_diff: float | None
    comparison: str
    base: int = 0  # the global rank every other rank is compared with: the lowest of the set (a node's own)

    def to_json(self) -> dict[str, Any]:
        return {"ranks": [self.base, self.rank], "on_rank": self.on_rank, **self.site.to_json(), "path": self.path,
                "how": self.how, "why": self.why, "rel_diff": self.rel_diff, "comparison": self.comparison}


@dataclass(frozen=True)
class ReplicaCheck:
    """The drift check of one run: every rank against rank 0 (the lowest rank of the set)."""

    backend: str | None
    world_size: int  # the ranks compared
    replicated_values: int  # replicated values rank 0 and the other ranks were seen to share
    drifts: tuple[Drift, ...]
    ranks: tuple[int, ...] = ()  # their global ranks, where not 0..world_size-1 (a node's part of a job)

    @property
    def first(self) -> Drift | None:
        return self.drifts[0] if self.drifts else None

    def to_json(self) -> dict[str, Any]:
        values = {"backend": self.backend, "world_size": self.world_size, "in_sync": not self.drifts,
                  "replicated_values": self.replicated_values, "drifts": [d.to_json() for d in self.drifts]}
        return {**values, "ranks": list(self.ranks)} if self.ranks else values


def check_replicas(rank_traces: list[Path], config: Config, backend: str | None = None,
                   ranks: Sequence[int] = ()) -> ReplicaCheck:
    """Compare every rank's replicated values with the first's (rank 0's); the drifts found, earliest rank
    first. `ranks`: the traces' global ranks, where they are not 0, 1, ... (one node's ranks of a job)."""
    numbers = tuple(ranks) or tuple(range(len(rank_traces)))
    drifts: list[Drift] = []
    shared = 0
    for rank, trace in zip(numbers[1:], rank_traces[1:]):
        walk = _PairWalk(rank, config, base=numbers[0])
        drift = walk.run(rank_traces[0], trace)
        shared += walk.shared
        if drift is not None:
            drifts.append(drift)
    named = numbers if numbers != tuple(range(len(rank_traces))) else ()
    return ReplicaCheck(backend, len(rank_traces), shared, tuple(drifts), named)


def _is_random(record: TraceRecord) -> bool:
    """Does the record draw from a random generator (its result depends on the generator's state too)?"""
    ops = [f.get("op") or "" for f in record.get("fuses") or []] if record["t"] == KERNEL else [record.get("op") or ""]
    return any(draws_random(op) for op in ops if op)


def _read_inputs(record: TraceRecord) -> list[Tensor]:
    """The tensors whose values the op reads (`place.read_inputs`) and the recorder fingerprinted: not
    values in flight, not uninitialized memory."""
    return [t for t in read_inputs(record) if t.get("fp") is not None and not t.get("uninit")]


# Tensors whose state a rank's walk keeps (the most recently written): an older one reads as a value from
# outside the trace, which counts as replicated only where the ranks agree on it.
_KEPT_VALUES = 1 << 18
# What a drift names of the record that made a value.
_PLACE_KEYS = ("t", "i", "op", "name", "src", "m", "code", "path")

# A value's state: replicated (None: from outside the trace), the record that made it, which output of it.
_State = tuple[bool | None, TraceRecord | None, str | None]
_OUTSIDE: _State = (None, None, None)


class _Values:
    """One rank's view of its values: for each tensor id, whether its current value is replicated
    (True, False, or None for a value from outside the trace), where the record that made it is, and
    which of that record's outputs it is (`split`'s chunk 0 or 1)."""

    def __init__(self) -> None:
        self.state: OrderedDict[int, _State] = OrderedDict()

    def of(self, tensor: Tensor) -> _State:
        return self.state.get(tensor["id"], _OUTSIDE)

    def set(self, tensor_id: int, state: _State) -> None:
        self.state.pop(tensor_id, None)
        self.state[tensor_id] = state
        if len(self.state) > _KEPT_VALUES:
            self.state.popitem(last=False)

    def write(self, record: TraceRecord, replicated: bool) -> None:
        # The record's own keys, those in _PLACE_KEYS: a TraceRecord still, without its tensors.
        place = cast(TraceRecord, {k: v for k, v in record.items() if k in _PLACE_KEYS})
        for out in record.get("out") or ():
            if out.get("uninit"):
                self.set(out["id"], (False, place, out.get("a")))  # garbage (`empty_like`): never alike by design
                continue
            self.set(out["id"], (replicated and out.get("pl") != "S", place, out.get("a")))  # a shard: each rank's own
            base = out.get("b")
            if base is not None:  # written through a view: the base holds it too
                before = self.state.get(base, _OUTSIDE)[0]
                self.set(base, (replicated and before is not False, place, None))


class _PairWalk:
    """Walks rank `base`'s trace (rank 0's) and rank `rank`'s together, in the first's order, to the first drift."""

    def __init__(self, rank: int, config: Config, base: int = 0) -> None:
        self.rank = rank
        self.base = base
        self.config = config
        self.values = (_Values(), _Values())
        self.shared = 0
        self.world_size: int | None = None
        self.ran_alone: tuple[set[int], set[int]] = (set(), set())  # indices of records one rank ran alone

    def run(self, trace_0: Path, trace_r: Path) -> Drift | None:
        skeleton_0, _, partner, _ = aligned_skeletons(trace_0, trace_r)
        self.world_size = skeleton_0.header.get("world_size")
        records_r = _Ahead(Trace(trace_r))
        for record, position in _with_positions(Trace(trace_0)):
            mate = None
            if position is not None and partner[position] >= 0:
                # What rank `rank` ran before its partner of this record, it ran alone (or out of order).
                for alone in records_r.until(partner[position]):
                    self._alone(1, alone)
                mate = records_r.take(partner[position])
            if mate is None:
                self._alone(0, record)
                continue
            drift = self._pair(record, mate)
            if drift is not None:
                return drift
        return None

    def _alone(self, side: int, record: TraceRecord) -> None:
        """A record only one rank ran: its outputs are replicated where its inputs are. A record that moves
        no value (`detach`, never aligned) passes its input's state on, as if both ranks ran it."""
        if record["t"] not in (OP, KERNEL):
            return
        values = self.values[side]
        if not alignable(record):
            state = values.of(record["in"][0]) if record.get("in") else _OUTSIDE
            for out in record.get("out") or ():
                values.set(out["id"], state)
            return
        self.ran_alone[side].add(record["i"])
        inputs = _read_inputs(record)
        replicated = bool(inputs) and not _is_random(record) and not is_collective(record.get("op")) and all(
            values.of(t)[0] is True for t in inputs)
        values.write(record, replicated)

    def _pair(self, a: TraceRecord, b: TraceRecord) -> Drift | None:
        if a["t"] not in (OP, KERNEL):
            return None
        inputs_a, inputs_b = _read_inputs(a), _read_inputs(b)
        comparable = len(inputs_a) == len(inputs_b)
        every_input_replicated = comparable and bool(inputs_a)
        if comparable:
            for ta, tb in zip(inputs_a, inputs_b):
                (rep_a, made_a, slot_a), (rep_b, made_b, slot_b) = self.values[0].of(ta), self.values[1].of(tb)
                if "S" in (ta.get("pl"), tb.get("pl")):  # a sharded DTensor: each rank holds its own part
                    rep_a = rep_b = False
                if _other_outputs(made_a, slot_a, made_b, slot_b):  # each rank took its own chunk of a `split`
                    rep_a = rep_b = False
                same = self._same(ta, tb, a)
                if rep_a and rep_b:
                    self.shared += 1
                    if same is not None and not same[0]:
                        return self._parted_before(a, ta, made_a, made_b, same)
                # A value from outside the trace (a program input) counts where the ranks agree on it.
                agreed = (rep_a is None and rep_b is None) and same is not None and same[0]
                every_input_replicated = every_input_replicated and ((rep_a and rep_b) or agreed)
        op = a.get("op")
        outputs_agree = self._outputs_agree(a, b)
        if op == _WAIT:
            replicated = bool(a.get("in")) and self.values[0].of(a["in"][0])[0] is True \
                and self.values[1].of(b["in"][0])[0] is True
        elif is_collective(op):
            replicated = base_op(str(op)) in _REPLICATING and a.get("gs") == self.world_size and a.get("gs") == b.get("gs")
        elif _is_random(a) or not inputs_a:
            replicated = outputs_agree is not None and outputs_agree[0]
        else:
            replicated = every_input_replicated and a.get("sa") == b.get("sa")
            if replicated and outputs_agree is not None and not outputs_agree[0]:
                return self._drift(0, a, "computed", "its inputs agree on both ranks (replicated values), its "
                                   "outputs do not", outputs_agree)
        if op == _WAIT and replicated and outputs_agree is not None and not outputs_agree[0]:
            made = self.values[0].of(a["in"][0])[1] or a
            return self._drift(0, made, "written", "a collective that gives every rank the same result left them "
                               "different", outputs_agree)
        self.values[0].write(a, replicated)
        self.values[1].write(b, replicated)
        return None

    def _parted_before(self, record: TraceRecord, tensor: Tensor, made_a: TraceRecord | None,
                       made_b: TraceRecord | None, same: tuple[bool, float, str]) -> Drift:
        """A replicated value this record reads differs: it was made different before, by an op only one
        rank ran, or by a collective whose results were not read where it ran."""
        if made_b is not None and made_b["i"] in self.ran_alone[1]:
            return self._drift(self.rank, made_b, "alone", f"only rank {self.rank} ran it, writing a value every rank "
                               f"holds (read at {record.get('src')} as {tensor.get('a')})", same)
        if made_a is not None and made_a["i"] in self.ran_alone[0]:
            return self._drift(0, made_a, "alone", f"only rank {self.base} ran it, writing a value every rank holds",
                               same)
        made = made_a or record
        if is_collective(made.get("op")):
            return self._drift(0, made, "written", "a collective that gives every rank the same result left them "
                               "different", same)
        return self._drift(0, made, "written", f"the value it wrote differs between the ranks (read at "
                           f"{record.get('src')})", same)

    def _same(self, ta: Tensor, tb: Tensor, record: TraceRecord) -> tuple[bool, float, str] | None:
        fa, fb = ta.get("fp"), tb.get("fp")
        if fa is None or fb is None or ta.get("uninit") or tb.get("uninit") or ta.get("dt") != tb.get("dt") or ta.get("sh") != tb.get("sh"):
            return None
        # The device's own looser tolerance (CUDA's) is for eager against compiled kernels; ranks run the
        # same kernels on the same inputs, so replicas are held to the tolerance of the dtype alone.
        tolerance = self.config.tolerance_for(ta["dt"], str(record.get("op") or ""), record.get("m"))
        result = compare_fingerprints(fa, fb, tolerance)
        return result.ok, result.rel_diff, result.describe()

    def _outputs_agree(self, a: TraceRecord, b: TraceRecord) -> tuple[bool, float, str] | None:
        """(agree, worst rel diff, in words) over the outputs both ranks read; None if none can be compared."""
        outs_a, outs_b = a.get("out") or [], b.get("out") or []
        if len(outs_a) != len(outs_b):
            return None
        judged = [s for s in (self._same(ta, tb, a) for ta, tb in zip(outs_a, outs_b)) if s is not None]
        if not judged:
            return None
        worst = max(judged, key=lambda s: (not s[0], s[1]))
        return worst

    def _drift(self, side: int, record: TraceRecord, how: str, why: str, same: tuple[bool, float, str]) -> Drift:
        site = Site(record.get("op") or record.get("name"), record.get("i"), record.get("src"), record.get("m"),
                    record.get("code"))
        return Drift(self.rank, self.rank if side else self.base, site, record.get("path"), how, why,
                     same[1] if same[1] != float("inf") else None, same[2], self.base)


def _other_outputs(made_a: TraceRecord | None, slot_a: str | None, made_b: TraceRecord | None,
                   slot_b: str | None) -> bool:
    """Are the two values different outputs of one op both ranks ran (chunk 0 of a `split` on rank 0, chunk 1
    on rank 1)? Each is a replica of its own, but they are not each other's."""
    return (made_a is not None and made_b is not None and made_a.get("op") == made_b.get("op")
            and None not in (slot_a, slot_b) and slot_a != slot_b)


def _with_positions(trace: Trace) -> Iterator[tuple[TraceRecord, int | None]]:
    """Every record, with its position among the alignable ones (None for the others)."""
    position = 0
    for record in trace:
        if alignable(record):
            yield record, position
            position += 1
        else:
            yield record, None


class _Ahead:
    """Rank r's records read in order: `until(j)` yields those before alignable position j, `take(j)` the
    one at j."""

    def __init__(self, trace: Trace) -> None:
        self._records = _with_positions(trace)
        self._next: tuple[TraceRecord, int | None] | None = next(self._records, None)

    def until(self, position: int) -> Iterator[TraceRecord]:
        while self._next is not None and (self._next[1] is None or self._next[1] < position):
            yield self._next[0]
            self._next = next(self._records, None)

    def take(self, position: int) -> TraceRecord | None:
        """The record at alignable position `position`, if it is next (None where the pairs cross)."""
        if self._next is None or self._next[1] != position:
            return None
        record = self._next[0]
        self._next = next(self._records, None)
        return record
