"""Pass 2 of a diff: walk trace A in order and find the cause of divergence.

Trace A is the reference. Each record paired with a record of B (align.py)
is compared: its outputs, and its inputs as B saw them. The first paired
record whose outputs disagree is the first *observation* of divergence:

- if its inputs agree, the op itself is the cause: pinned, one candidate;
- if an input already disagrees, the cause lies upstream among records that
  had no partner in B (fused into a kernel, decomposed differently): follow
  dataflow back from the disagreeing input through those records until values
  known to agree; the records passed are the candidates.

Everything that disagrees later is inherited (an echo), only counted. Both
files are streamed; what stays in memory is the alignment and a bounded map
of recent unpaired producers for the walk back.
"""

from __future__ import annotations

import math
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterator

from tracediff.config import Config
from tracediff.diff.compare import TensorComparison, compare_fingerprints, has_nonfinite
from tracediff.diff.align import SHAPE_TIER
from tracediff.diff.skeleton import Skeleton, alignable, base_op
from tracediff.trace.reader import Trace
from tracediff.trace.schema import KERNEL, OP, REGION

# Bounds for the walk back: producers remembered, and nodes visited per walk.
_PRODUCER_WINDOW = 500_000
_WALK_LIMIT = 10_000
_STRUCTURE_EXAMPLES = 5


@dataclass(frozen=True)
class Place:
    """Where a record is: op, trace index, source line and module."""

    index: int
    op: str
    source: str | None
    module: str | None
    code: str | None = None
    path: str | None = None

    @classmethod
    def of(cls, record: dict[str, Any]) -> "Place":
        if record["t"] == REGION:
            name = f"region {record['ev']} {record['name']} (call {record['call']})"
        else:
            name = record.get("op") or record.get("name") or record["t"]
        return cls(record["i"], name, record.get("src"), record.get("m"), record.get("code"), record.get("path"))

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "index": self.index, "source": self.source, "module": self.module, "code": self.code}


@dataclass(frozen=True)
class TensorDiff:
    """One disagreeing tensor of a paired record."""

    side: str  # "input" or "output"
    arg: str
    dtype: str
    shape: tuple[int, ...]
    a: dict[str, Any]
    b: dict[str, Any]
    comparison: TensorComparison


@dataclass(frozen=True)
class Divergence:
    kind: str  # "output" | "nan" | "structure"
    a: Place  # the op reported as the cause (trace A)
    b: Place | None  # B's counterpart of `observed`
    candidates: tuple[Place, ...]
    worst: TensorDiff | None
    inputs_agree: bool
    note: str
    observed: Place | None = None  # where A first showed the difference, if not at `a`

    @property
    def rel_diff(self) -> float | None:
        if self.worst is None:
            return None
        return self.worst.comparison.rel_diff


@dataclass
class DiffResult:
    a: Skeleton
    b: Skeleton
    first: Divergence | None = None
    inherited: int = 0  # later records whose outputs also disagree
    compared: int = 0  # paired records compared
    paired: int = 0
    unpaired_a: int = 0
    unpaired_b: int = 0
    structure: list[str] = field(default_factory=list)
    structure_count: int = 0
    nan_origin_a: Place | None = None
    nan_origin_b: Place | None = None


def _key(t: dict[str, Any]) -> tuple[int, Any]:
    return t["id"], t.get("v")


def _comparable(ta: dict[str, Any], tb: dict[str, Any]) -> bool:
    return (
        ta.get("fp") is not None and tb.get("fp") is not None and not ta.get("uninit") and not tb.get("uninit")
        and ta["dt"] == tb["dt"] and ta["sh"] == tb["sh"]
    )


def _pair_tensors(xs: list[dict[str, Any]], ys: list[dict[str, Any]], by_name: bool) -> Iterator[tuple[dict, dict]]:
    """Corresponding tensors: by argument name when both ops name them alike, else by order."""
    if by_name:
        named = {t["a"]: t for t in ys}
        if all(t["a"] in named for t in xs):
            for t in xs:
                yield t, named[t["a"]]
            return
    yield from zip(xs, ys)


def _first_nonfinite_origin(record: dict[str, Any]) -> bool:
    """True when an op produces NaN/Inf from finite inputs."""
    if record["t"] != OP or record.get("nfs"):
        return False
    # Uninitialized memory may hold NaN bit patterns: that is garbage, not a NaN origin.
    if not any(has_nonfinite(t.get("fp")) and not t.get("uninit") for t in record.get("out", ())):
        return False
    return not any(has_nonfinite(t.get("fp")) for t in record.get("in", ()))


class _Walker:
    """Pass-2 state for trace A: producers of values not known to agree, and of those that do."""

    def __init__(self) -> None:
        # (tensor id, version) -> (record, is a candidate): bounded, oldest dropped first.
        self.producers: OrderedDict[tuple[int, Any], tuple[dict[str, Any], bool]] = OrderedDict()
        # (tensor id, version) -> record whose output agreed with B's when produced.
        self.agreed: OrderedDict[tuple[int, Any], dict[str, Any]] = OrderedDict()

    def unknown(self, record: dict[str, Any], candidate: bool) -> None:
        for t in record.get("out", ()):
            key = _key(t)
            self.producers.pop(key, None)
            self.producers[key] = (record, candidate)
        while len(self.producers) > _PRODUCER_WINDOW:
            self.producers.popitem(last=False)

    def known(self, record: dict[str, Any]) -> None:
        """The record's outputs agree with B's; uninitialized ones stay suspects for the walk."""
        for t in record.get("out", ()):
            key = _key(t)
            self.producers.pop(key, None)
            if t.get("uninit"):
                self.producers[key] = (record, True)
            else:
                self.agreed.pop(key, None)
                self.agreed[key] = record
        while len(self.agreed) > _PRODUCER_WINDOW:
            self.agreed.popitem(last=False)

    def walk_back(self, start: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Candidate records upstream of `start` tensors, oldest first."""
        found: dict[int, dict[str, Any]] = {}
        visited: set[int] = set()
        stack = [_key(t) for t in start]
        while stack and len(visited) < _WALK_LIMIT:
            entry = self.producers.get(stack.pop())
            if entry is None:
                continue
            record, candidate = entry
            if record["i"] in visited:
                continue
            visited.add(record["i"])
            if candidate:
                found[record["i"]] = record
            stack.extend(_key(t) for t in record.get("in", ()) if t.get("fp") is not None or t.get("uninit"))
        return [found[i] for i in sorted(found)]


class _Comparer:
    def __init__(self, config: Config) -> None:
        self.config = config

    def diffs(self, side: str, xs: list, ys: list, ra: dict[str, Any], by_name: bool) -> tuple[list[TensorDiff], int]:
        """Disagreeing tensors, and how many were compared."""
        op = ra.get("op") or ra.get("name") or ""
        out: list[TensorDiff] = []
        compared = 0
        for ta, tb in _pair_tensors(xs, ys, by_name):
            if not _comparable(ta, tb):
                continue
            compared += 1
            tolerance = self.config.tolerance_for(ta["dt"], op, ra.get("m"), ta.get("dev", "cpu"))
            result = compare_fingerprints(ta["fp"], tb["fp"], tolerance)
            if not result.ok:
                out.append(TensorDiff(side, ta["a"], ta["dt"], tuple(ta["sh"]), ta["fp"], tb["fp"], result))
        return out, compared


def _worst(diffs: list[TensorDiff]) -> TensorDiff:
    return max(diffs, key=lambda d: (d.comparison.nonfinite, d.comparison.rel_diff if math.isfinite(d.comparison.rel_diff) else 1e308))


def _kind(worst: TensorDiff | None) -> str:
    return "nan" if worst is not None and worst.comparison.nonfinite else "output"


def _same_op(ra: dict[str, Any], rb: dict[str, Any]) -> bool:
    """Do the two records compute the same op (a kernel: the last op it fuses)?"""
    if ra["t"] == REGION or rb["t"] == REGION:
        return ra["t"] == rb["t"]
    name_b = rb.get("op")
    if rb["t"] == KERNEL:
        fuses = rb.get("fuses") or []
        name_b = fuses[-1]["op"] if fuses else None
    return name_b is not None and base_op(ra.get("op", "")) == base_op(name_b)


def _tensor_args(record: dict[str, Any]) -> set[str]:
    return {t["a"] for t in record.get("in", ()) if t.get("fp") is not None or t.get("uninit")}


def _comparable_pair(ra: dict[str, Any], rb: dict[str, Any], tier: int, comparer: "_Comparer", by_name: bool) -> bool:
    """Is a pair from the aligner evidence enough to compare outputs?

    - Same op, called with different tensor arguments (inductor on CUDA calls
      `convolution` without its bias and adds the bias in a fused kernel): the
      outputs are different quantities.
    - Different ops paired on shapes alone: only a substitution (cos computed
      as sin) when both read values that were compared and agree.
    """
    if ra["t"] == OP and rb["t"] == OP and ra["op"] == rb["op"] and _tensor_args(ra) != _tensor_args(rb):
        return False
    if tier == SHAPE_TIER and not _same_op(ra, rb):
        if rb["t"] == KERNEL:
            return False
        substituted, compared_inputs = comparer.diffs("input", ra.get("in", []), rb.get("in", []), ra, by_name)
        return bool(compared_inputs) and not substituted
    return True


def find_divergence(a: Skeleton, b: Skeleton, partner: array, tier: bytearray, config: Config) -> DiffResult:
    result = DiffResult(a, b)
    compiled = bool((a.footer or {}).get("compile_calls") or (b.footer or {}).get("compile_calls"))
    walker = _Walker()
    comparer = _Comparer(config)
    b_producers: OrderedDict[tuple[int, Any], dict[str, Any]] = OrderedDict()
    b_records = _b_records(Trace(b.path), result, b_producers)
    b_index = -1
    paired_b: dict[str, Any] | None = None
    region_inputs_b: dict[tuple, dict] = {}
    alignable_index = -1

    def note_structure(text: str) -> None:
        result.structure_count += 1
        if len(result.structure) < _STRUCTURE_EXAMPLES:
            result.structure.append(text)

    for ra in Trace(a.path):
        if result.nan_origin_a is None and _first_nonfinite_origin(ra):
            result.nan_origin_a = Place.of(ra)
        if not alignable(ra):
            walker.unknown(ra, candidate=False)  # pass-through for the walk back (detach, alias)
            continue
        alignable_index += 1
        j = partner[alignable_index]
        ignored = ra["t"] == OP and config.is_ignored(ra["op"], ra.get("m"))
        if j < 0:
            result.unpaired_a += 1
            walker.unknown(ra, candidate=not ignored)
            if ra["t"] == REGION:
                note_structure(f"only in A: {Place.of(ra).op} (#{ra['i']})")
            elif not compiled:
                note_structure(f"only in A: {ra.get('op')} at {ra.get('src')} (#{ra['i']})")
            continue
        # Advance B to the partner; what B has in between is unpaired there.
        while b_index < j:
            paired_b = next(b_records)
            b_index += 1
            if b_index < j:
                result.unpaired_b += 1
                if paired_b["t"] == REGION or not compiled:
                    note_structure(f"only in B: {Place.of(paired_b).op} at {paired_b.get('src')} (#{paired_b['i']})")
        rb = paired_b
        assert rb is not None
        # A one-op kernel's buffers are its op's arguments, in order; other pairs match by name when the op is the same.
        by_name = (ra.get("op") == rb.get("op") or ra["t"] == REGION) and rb["t"] != KERNEL
        if not _comparable_pair(ra, rb, tier[alignable_index], comparer, by_name):
            result.unpaired_a += 1
            result.unpaired_b += 1
            walker.unknown(ra, candidate=not ignored)
            continue
        result.paired += 1
        if ignored:
            # Not compared and never a cause, but the walk back may pass through it.
            walker.unknown(ra, candidate=False)
            continue
        result.compared += 1

        out_diffs, _ = comparer.diffs("output", ra.get("out", []), rb.get("out", []), ra, by_name=True)
        if result.first is not None:
            result.inherited += bool(out_diffs)
            continue
        in_diffs, _ = comparer.diffs("input", ra.get("in", []), rb.get("in", []), ra, by_name=by_name)

        fused_kernel = rb["t"] == KERNEL and len(rb.get("fuses") or ()) != 1
        if (ra["t"] == REGION and ra["ev"] == "exit") or fused_kernel:
            # A region's outputs come from the ops inside it, a kernel's from the ops it
            # fuses: those are the candidates. Their inputs are not comparable one to one.
            if out_diffs:
                bad = [t for t in ra.get("out", []) if t["a"] in {d.arg for d in out_diffs}]
                if ra["t"] == OP:
                    walker.unknown(ra, candidate=True)  # the chain's last op is a candidate too
                result.first = _from_walk(ra, rb, walker.walk_back(bad), out_diffs, inputs_agree=True)
            else:
                walker.known(ra)
            continue
        if out_diffs and not in_diffs:
            worst = _worst(out_diffs)
            result.first = Divergence(_kind(worst), Place.of(ra), Place.of(rb), (Place.of(ra),), worst, True,
                                      "inputs agree, outputs differ")
        elif in_diffs and (out_diffs or ra["t"] == REGION):
            bad = [t for t in ra.get("in", []) if t["a"] in {d.arg for d in in_diffs}]
            candidates = walker.walk_back(bad)
            if candidates:
                result.first = _from_walk(ra, rb, candidates, out_diffs or in_diffs, inputs_agree=False)
            else:
                result.first = _changed_in_between(ra, rb, in_diffs, out_diffs, walker, b_producers, by_name)
        else:
            walker.known(ra)

    # Drain B: anything left there is unpaired (and may hold B's first NaN).
    for rb in b_records:
        result.unpaired_b += 1
        if rb["t"] == REGION or not compiled:
            note_structure(f"only in B: {Place.of(rb).op} at {rb.get('src')} (#{rb['i']})")

    if result.first is None and config.strict_structure and result.structure:
        result.first = Divergence("structure", Place(-1, "structure", None, None), None, (), None, True,
                                  f"{result.structure_count} structure difference(s): {result.structure[0]}")
    return result


def _changed_in_between(ra: dict, rb: dict, in_diffs: list[TensorDiff], out_diffs: list[TensorDiff], walker: _Walker,
                        b_producers: "OrderedDict[tuple[int, Any], dict[str, Any]]", same_op: bool) -> Divergence:
    """An input differs although no unpaired op of A produced it.

    Either the value agreed when A's producer made it and B changed it before
    this op read it (an op only B runs, e.g. one a compiler pass inserted), or
    it is a program input that differs from the start.
    """
    bad = _worst(in_diffs)
    worst = bad  # the value B changed is the one to show
    ta = next(t for t in ra.get("in", []) if t["a"] == bad.arg)
    producer_a = walker.agreed.get(_key(ta))
    tb = next((y for x, y in _pair_tensors(ra.get("in", []), rb.get("in", []), same_op) if x is ta), None)
    producer_b = b_producers.get(_key(tb)) if tb is not None else None
    if producer_a is None:
        note = (f"its input {bad.arg!r} already differs and no recorded op of A produced it: "
                "a program input, parameter or buffer differs between the runs")
        return Divergence(_kind(worst), Place.of(ra), Place.of(rb), (Place.of(ra),), worst, False, note)
    made = Place.of(producer_a)
    if producer_b is not None and producer_b is not rb:
        changer = Place.of(producer_b)
        what = changer.op
        if producer_b["t"] == "kernel":
            what = f"kernel {producer_b['name']} ({', '.join(f['op'] for f in producer_b.get('fuses', []))})"
        note = (f"the output of {made.op} agrees, but B changes it before {Place.of(ra).op} (#{ra['i']}) reads it: "
                f"B runs {what} at {changer.source} (#{changer.index}), which A does not")
    else:
        note = f"the output of {made.op} agrees, but differs by the time {Place.of(ra).op} (#{ra['i']}) reads it"
    return Divergence(_kind(worst), made, Place.of(producer_b) if producer_b else Place.of(rb), (made,), worst, False,
                      note, observed=Place.of(ra))


def _from_walk(ra: dict, rb: dict, candidates: list[dict], diffs: list[TensorDiff], inputs_agree: bool) -> Divergence:
    worst = _worst(diffs)
    if not candidates:
        what = "its input" if not inputs_agree else "its output"
        note = (f"{what} {worst.arg!r} already differs and no recorded op of A produced it: "
                "a program input, parameter or buffer differs between the runs")
        return Divergence(_kind(worst), Place.of(ra), Place.of(rb), (Place.of(ra),), worst, inputs_agree, note)
    places = tuple(Place.of(r) for r in candidates)
    seen = Place.of(ra)
    if len(places) == 1:
        note = f"pinned: the only op between agreeing values and {seen.op} (#{seen.index}), where the difference shows"
    else:
        note = (f"localized to {len(places)} ops with no counterpart in B (fused or decomposed) "
                f"feeding {seen.op} (#{seen.index}); reported: the last of them")
    uninit = [p for p, r in zip(places, candidates) if any(t.get("uninit") for t in r.get("out", ()))]
    if uninit:
        note += f"; {uninit[0].op} at {uninit[0].source} returns uninitialized memory that is read before written"
    return Divergence(_kind(worst), places[-1], Place.of(rb), places, worst, inputs_agree, note, observed=seen)


def _b_records(trace: Trace, result: DiffResult, producers: "OrderedDict[tuple[int, Any], dict[str, Any]]") -> Iterator[dict[str, Any]]:
    """B's alignable records in order; notes B's first NaN origin and the producer of each value."""
    for record in trace:
        if result.nan_origin_b is None and _first_nonfinite_origin(record):
            result.nan_origin_b = Place.of(record)
        for t in record.get("out", ()):
            key = _key(t)
            producers.pop(key, None)
            producers[key] = record
        while len(producers) > _PRODUCER_WINDOW:
            producers.popitem(last=False)
        if alignable(record):
            yield record
