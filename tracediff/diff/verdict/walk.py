"""Walk trace A in order with B in step, and find the first divergence.

Trace A is the reference. Each record paired with a record of B (align.py) is compared: its outputs,
and its inputs as B saw them. Before a pair is judged, two pairing rules may drop it: `comparable_pair`
(pairing.py: the same op on other arguments, different ops paired on shapes alone) and a pair by value
whose ops differ (a softmax and the dropout after it both sum to the row count). The first pair
`pair_rules.judge` finds diverged is the first divergence; the refinements (refinements.py) may then
move it to where a difference below the tolerance was made, upstream of where it first showed.

Later disagreements are echoes, counted up to a limit; then reading stops, so a divergence early in a
long run is reported without parsing the rest. Both files are streamed; what stays in memory is the
alignment and bounded maps of compact producer entries for the walk back. For a long trace B, B's maps are
kept by a second process (remote_b_side.py), which files them while this one compares.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable

from tracediff.config import Config
from tracediff.diff.align import VALUE_TIER, paired_in_b
from tracediff.diff.amplified import Amplified, Amplifier
from tracediff.diff.compare import TensorDiff
from tracediff.diff.computed import ComputedValues
from tracediff.diff.noise import Noise
from tracediff.diff.place import Place
from tracediff.diff.sample import AGREE, DIFFER, UNCHECKED, AlignmentSample
from tracediff.diff.second_process import can_fork_a_helper
from tracediff.diff.skeleton import Skeleton, alignable
from tracediff.diff.verdict.a_side import ASide
from tracediff.diff.verdict.b_side import BSide, BSideView
from tracediff.diff.verdict.comparer import Comparer
from tracediff.diff.verdict.divergence import DiffResult, Divergence
from tracediff.diff.verdict.loose import LooseEntries, LooseEntry, loosely_agreeing, moved
from tracediff.diff.verdict.pair_rules import Agreed, Carried, Diverged, NotOnePair, Pair, Passed, Walk, judge
from tracediff.diff.verdict.pairing import comparable_pair, same_op
from tracediff.diff.verdict.refinements import (
    absorbed_change,
    from_a_loose_entry,
    from_an_absorbed_change,
    unsure_if_barely_beyond,
)
from tracediff.diff.verdict.remote_b_side import RemoteBSide
from tracediff.diff.verdict.updates import mark_an_unread_update
from tracediff.trace.compression import estimated_text_bytes
from tracediff.trace.reader import Trace
from tracediff.trace.schema import KERNEL, OP, REGION, TraceRecord

# Echoes counted before reading stops; structure differences kept as examples.
_INHERITED_LIMIT = 10_000
_STRUCTURE_EXAMPLES = 5
# Records of A between two progress lines of a long walk (about a minute's work).
_PROGRESS_EVERY = 1_000_000


def find_divergence(a: Skeleton, b: Skeleton, partner: array, tier: bytearray, config: Config, *,
                    sample: AlignmentSample | None = None, noise: Noise | None = None,
                    progress: Callable[[str], None] | None = None) -> DiffResult:
    """Walk A with B in step; `sample`, if given, is told every aligned row (for the HTML report); `progress`,
    a line every _PROGRESS_EVERY records of A."""
    walker = _Walker(a, b, partner, tier, config, sample, noise)
    try:
        walker.run(progress)
    except BaseException:
        walker.abandon()
        raise
    return walker.finish()


class _Walker:
    """One walk over A: the state between records, and what each kind of record does to it."""

    def __init__(self, a: Skeleton, b: Skeleton, partner: array, tier: bytearray, config: Config,
                 sample: AlignmentSample | None, noise: Noise | None) -> None:
        self.result = DiffResult(a, b, noise=noise)
        self.partner, self.tier, self.config, self.sample = partner, tier, config, sample
        self.compiled = bool((a.footer or {}).get("compile_calls") or (b.footer or {}).get("compile_calls"))
        comparer = Comparer(config, noise)
        amplified = self.result.amplified = Amplified()
        # Per alignable record of B: does it have a partner in A? (B's side, then the counts.)
        self.paired_b = paired_in_b(partner, len(b))
        b_side = _b_side(b, self.paired_b, a.op_lines, remote=sample is None and remote_b_side(b))
        self.walk = Walk(comparer, ASide(comparer.garbage, amplified), b_side, ComputedValues(b.path), amplified,
                         LooseEntries())
        self.rejected = 0
        # The first value B changed after it agreed whose reader's output still agreed (within the tolerance).
        self.absorbed: Divergence | None = None
        # The change below the tolerance the first divergence's inputs carry.
        self.first_entry: LooseEntry | None = None

    def run(self, progress: Callable[[str], None] | None = None) -> None:
        result, walk, sample = self.result, self.walk, self.sample
        alignable_index = -1
        started = time.monotonic()
        for ra in Trace(result.a.path):
            if sample is not None and result.first is not None:
                sample.diverged()  # found at the previous row
            walk.comparer.precision.record(ra)
            walk.comparer.garbage.record(ra)
            if ra["t"] == REGION:
                walk.seen_regions = True
                walk.open_regions = walk.open_regions + 1 if ra["ev"] == "enter" else max(walk.open_regions - 1, 0)
            if not alignable(ra):
                self._unknown(ra, candidate=False)  # pass-through for the walk back (detach, alias)
                continue
            alignable_index += 1
            if progress is not None and alignable_index and not alignable_index % _PROGRESS_EVERY:
                found = "; the first divergence found, counting what follows" if result.first is not None else ""
                progress(f"diff: compared {alignable_index:,} of {len(result.a):,} records of A "
                         f"({time.monotonic() - started:.0f} s){found}")
            if not self._visit(ra, alignable_index):
                return

    def _visit(self, ra: TraceRecord, alignable_index: int) -> bool:
        """Compare A's record `ra` with its partner, if it has one; False once enough echoes are counted."""
        walk, sample, config = self.walk, self.sample, self.config
        j = self.partner[alignable_index]
        ignored = ra["t"] == OP and config.is_ignored(ra["op"], ra.get("m"))
        if j < 0:
            self._unknown(ra, candidate=not ignored)
            self._example("A", ra)
            if sample is not None:
                sample.only_a(ra)
            return True
        for skipped in walk.b_side.advance_to(j):
            self._example("B", skipped)
            if sample is not None:
                sample.only_b(skipped)
        rb = walk.b_side.current
        assert rb is not None
        # A one-op kernel's buffers are its op's arguments, in order; other pairs match by name when the op is the same.
        by_name = (ra.get("op") == rb.get("op") or ra["t"] == REGION) and rb["t"] != KERNEL
        comparable = comparable_pair(ra, rb, self.tier[alignable_index], walk.comparer, by_name)
        if not comparable or ignored:
            # Ignored: not compared and never a cause, but the walk back may pass through it.
            self.rejected += not comparable
            self._unknown(ra, candidate=not ignored)
            if sample is not None:
                sample.pair(ra, rb, None, UNCHECKED)
            return True
        return self._compare(ra, rb, by_name, self.tier[alignable_index] == VALUE_TIER)

    def _compare(self, ra: TraceRecord, rb: TraceRecord, by_name: bool, value_tier: bool) -> bool:
        result, walk, sample = self.result, self.walk, self.sample
        rels: list[float] | None = [] if sample is not None else None
        kernel = KERNEL in (ra["t"], rb["t"])
        out_passed: Passed = []
        out_diffs, _ = walk.comparer.diffs("output", ra.get("out", []), rb.get("out", []), ra, by_name=True,
                                           rels=rels, passed=out_passed, kernel=kernel)
        if out_diffs and value_tier and not same_op(ra, rb):
            # Different ops paired only because their rounded fingerprints collided (a softmax
            # and the dropout after it both sum to the row count): not the same value, no pair.
            self.rejected += 1
            self._unknown(ra, candidate=True)
            if sample is not None:
                sample.only_a(ra)
            return True
        result.compared += 1
        if sample is not None:
            sample.pair(ra, rb, max(rels) if rels else None, DIFFER if out_diffs else AGREE)
        if result.first is not None:
            result.inherited += bool(out_diffs)
            if result.inherited >= _INHERITED_LIMIT:
                result.inherited_complete = False
                result.read_to = ra["i"]
                return False
            return True
        self._take(self._pair(ra, rb, by_name, value_tier, out_diffs, out_passed))
        return True

    def _pair(self, ra: TraceRecord, rb: TraceRecord, by_name: bool, value_tier: bool,
              out_diffs: list[TensorDiff], out_passed: Passed) -> Pair:
        """The pair with its inputs compared; inputs that differ only because an earlier op amplified
        sub-tolerance noise are set apart (`carried`): no cause there."""
        walk = self.walk
        passed: Passed = []
        in_diffs, _ = walk.comparer.diffs("input", ra.get("in", []), rb.get("in", []), ra, by_name=by_name,
                                          passed=passed, kernel=KERNEL in (ra["t"], rb["t"]))
        loose_entry = walk.loose_entries.read_by(ra, passed, walk.a_side)
        origins = [_input_origin(ra, d, walk.amplified) for d in in_diffs]
        carried = [(d, origin) for d, origin in zip(in_diffs, origins) if origin is not None]
        return Pair(ra, rb, by_name, value_tier, out_diffs, out_passed,
                    [d for d, origin in zip(in_diffs, origins) if origin is None], passed,
                    [d for d, _ in carried], [origin for _, origin in carried], loose_entry)

    def _take(self, pair: Pair) -> None:
        """What the rule that judged `pair` said, done."""
        walk = self.walk
        self.first_entry = pair.loose_entry
        step = judge(pair, walk)
        if isinstance(step, Diverged):
            self.result.first, self.first_entry = step.divergence, step.loose_entry
            walk.b_side.stop_filing()
        elif isinstance(step, NotOnePair):
            self.result.compared -= 1
            self.rejected += 1
            walk.a_side.unknown(pair.a, candidate=True)
        elif isinstance(step, Carried):
            walk.a_side.unknown(pair.a, candidate=False, compared=True)
        elif isinstance(step, Agreed):
            self._agreed(pair, step.after_an_update)

    def _agreed(self, pair: Pair, after_an_update: bool) -> None:
        walk, ra, rb = self.walk, pair.a, pair.b
        self.absorbed = self.absorbed or absorbed_change(ra, rb, pair.in_diffs, pair.kernel, walk.comparer,
                                                         walk.a_side, walk.b_side, pair.by_name)
        walk.loose_entries.carry(ra, moved(pair.out_passed),
                                 pair.loose_entry or walk.loose_entries.started_by(ra, pair.passed, pair.out_passed))
        walk.a_side.known(ra)
        walk.b_side.agree(rb, ra["i"], {t.get("a") for t in loosely_agreeing(pair.out_passed)})
        if after_an_update:
            mark_an_unread_update(ra, rb, pair.passed, walk.amplified, walk.a_side, walk.outside_regions)

    def _unknown(self, ra: TraceRecord, candidate: bool) -> None:
        """File A's record `ra` as a producer of values not known to agree, until the first divergence: after
        it, only echoes are counted, and no rule walks back (a drifting training run's diff reads on for a
        million records, whose producers would fill the tables for nothing)."""
        if self.result.first is None:
            self.walk.a_side.unknown(ra, candidate)

    def _example(self, side: str, record: TraceRecord) -> None:
        result = self.result
        if (record["t"] == REGION or not self.compiled) and len(result.structure) < _STRUCTURE_EXAMPLES:
            place = Place.of(record)
            result.structure.append(f"only in {side}: {place.op}{place.at} (#{place.index})")

    def abandon(self) -> None:
        """The walk failed or was interrupted: end B's process, if it has one, asking nothing."""
        self.walk.b_side.close(check=False)

    def finish(self) -> DiffResult:
        result, sample = self.result, self.sample
        self.walk.b_side.close()
        if sample is not None:
            if result.first is not None:
                sample.diverged()
            if result.inherited_complete:
                for rest in self.walk.b_side.rest():
                    sample.only_b(rest)
            sample.finish((result.a.header, result.b.header), stopped_early=not result.inherited_complete)
        result.passed_by_noise = self.walk.comparer.passed_by_noise
        result.closest_to_noise = self.walk.comparer.closest
        _count_structure(result, self.partner, self.paired_b, self.rejected, self.compiled)
        if result.first is not None:
            result.first = from_a_loose_entry(
                from_an_absorbed_change(unsure_if_barely_beyond(result.first), self.absorbed), self.first_entry)
        if result.first is None and self.config.strict_structure and result.structure_count:
            detail = result.structure[0] if result.structure else "see the counts"
            result.first = Divergence("structure", Place(-1, "structure", None, None), None, (), None, True,
                                      f"{result.structure_count} structure difference(s): {detail}", rule="structure")
        return result


# From this size of trace B (of JSON lines: a compressed one's is estimated), B's side of the walk runs in a
# process of its own (remote_b_side.py): below it, starting one costs more than it saves.
REMOTE_B_SIDE_BYTES = 64 * 2**20


def remote_b_side(b: Skeleton) -> bool:
    """Should B's side of the walk run in a second process? For a long trace B, with a second core to run it."""
    return can_fork_a_helper() and estimated_text_bytes(b.path) >= REMOTE_B_SIDE_BYTES


def _b_side(b: Skeleton, paired_b: bytearray, a_op_lines: set[int], remote: bool) -> BSideView:
    return RemoteBSide(b.path, paired_b, a_op_lines) if remote else BSide(b.path, paired_b, a_op_lines)


def _count_structure(result: DiffResult, partner: array, paired_b: bytearray, rejected: int, compiled: bool) -> None:
    """Pairing counts from the alignment itself (`paired_b`: per record of B, has it a partner), so they hold
    even when reading stopped early."""
    a, b = result.a, result.b
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


def _input_origin(ra: TraceRecord, d: TensorDiff, amplified: Amplified) -> Amplifier | None:
    """The amplifier behind a differing input of `ra`, if its difference is amplified noise."""
    return next((amplified.origin(t) for t in ra.get("in", ()) if t["a"] == d.arg), None)
