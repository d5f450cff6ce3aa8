"""The diff of two long traces that hold long stretches alike, without reading those stretches.

Two runs of one program (a re-run, another machine, a golden trace) often record the same records, value for
value, for most of their length. Their digest indexes (trace/digest_index.py) show where: `identical_stretches`
matches the two sequences of digests, at C speed where they agree. The middle of each long stretch is left out,
`CONTEXT` records on either side of what differs are kept, and the kept records, header and footer written as
two shorter traces that the usual diff reads (engine.py): what is left out are pairs of records with equal
values, which can neither diverge nor be the cause of a divergence. Their counts are added back to the result.

After the first divergence most runs differ everywhere (B's values all carry it): a tail without stretches
alike is read `TAIL_RECORDS` at a time, as far as the walk needs to count its echoes and stop; the pairing
counts then cover what was read, as the walk's reading does.

Records the diff must see whatever their digest (regions, same-input checks, NaN and Inf values: the index's
KEEP) are never left out, and a tail holding checks or NaN is read whole.
"""

from __future__ import annotations

import bisect
import math
import re
import tempfile
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tracediff.diff.skeleton import op_line_key
from tracediff.diff.verdict.divergence import DiffResult
from tracediff.trace.compression import Compression, compression_of_file, open_bytes
from tracediff.trace.digest_index import CHECK, IS_OP, KEEP, NO_VALUE, NONFINITE, DigestIndex, read_digest_index
from tracediff.trace.reader import parse_line, read_footer

# Records kept on each side of a difference: the alignment's anchors and the walk's nearby producers.
CONTEXT = 16
# A stretch alike is left out only where that saves this many records or more.
_MIN_LEFT_OUT = 64
# Equal digests in a row that say two runs are in step again after a difference.
_RESYNC_RUN = 8
# How far past a difference to look for the runs' next records alike.
_LOOKAHEAD = (64, 4096, 65536)
# Records of a tail without stretches alike read at first; 8 times more each time that was too few.
TAIL_RECORDS = 50_000
# The shortcut is taken where it leaves out at least this share of trace A.
_WORTHWHILE = 0.25

DiffFiles = Callable[[Path, Path, set[int]], DiffResult]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Stretch:
    """Records a..a+length of A hold what records b..b+length of B hold, one for one."""

    a: int
    b: int
    length: int


def identical_stretches(da: array, db: array) -> tuple[list[Stretch], tuple[int, int] | None]:
    """The stretches alike, in order, and where the runs fell out of step for good (None if they did not)."""
    stretches: list[Stretch] = []
    i = j = 0
    while i < len(da) and j < len(db):
        length = _common_run(da, i, db, j)
        if length:
            stretches.append(Stretch(i, j, length))
            i, j = i + length, j + length
            continue
        step = _next_in_step(da, i, db, j)
        if step is None:
            return stretches, (i, j)
        i, j = step
    return stretches, None


def _common_run(da: array, i: int, db: array, j: int) -> int:
    """How many digests from da[i] and db[j] on are equal, in slices compared at C speed."""
    limit = min(len(da) - i, len(db) - j)
    length, step = 0, 64
    while length < limit:
        size = min(step, limit - length)
        a, b = i + length, j + length
        if da[a:a + size] == db[b:b + size]:
            length += size
            step = min(step * 4, 1 << 20)
            continue
        lo, hi = 0, size  # [0, lo) equal; a difference in [lo, hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if da[a + lo:a + mid] == db[b + lo:b + mid]:
                lo = mid
            else:
                hi = mid
        return length + lo
    return length


def _next_in_step(da: array, i: int, db: array, j: int) -> tuple[int, int] | None:
    """The nearest (i', j') past a difference from which _RESYNC_RUN digests agree: the fewest records skipped on
    both sides together, looked for ever further."""
    for reach in _LOOKAHEAD:
        b_end = min(len(db), j + reach)
        first_in_b = dict(zip(reversed(db[j:b_end]), range(b_end - 1, j - 1, -1)))
        best: tuple[int, int, int] | None = None
        for k in range(i, min(len(da), i + reach)):
            if best is not None and k - i >= best[0]:
                break
            at = first_in_b.get(da[k])
            if at is None:
                continue
            run = da[k:k + _RESYNC_RUN]
            if len(run) == _RESYNC_RUN and run == db[at:at + _RESYNC_RUN]:
                skipped = k - i + at - j
                if best is None or skipped < best[0]:
                    best = (skipped, k, at)
        if best is not None:
            return best[1], best[2]
    return None


def _matchable(index: DigestIndex, side: str) -> array:
    """The digests, those of records the diff must read made unique (they never match): changed in place."""
    digests = index.digests
    kept = index.facts.translate(_KEEP_TABLE)
    at = kept.find(1)
    while at != -1:
        digests[at] = hash((side, at))
        at = kept.find(1, at + 1)
    return digests


_KEEP_TABLE = bytes(1 if value & KEEP else 0 for value in range(256))
_TAIL_TABLE = bytes(1 if value & (NONFINITE | CHECK) else 0 for value in range(256))
_ALIGNABLE_TABLE = bytes(0 if value & NO_VALUE else 1 for value in range(256))
_OP_TABLE = bytes(1 if value & IS_OP else 0 for value in range(256))


@dataclass
class _Side:
    """What is read of one trace: the line ranges [lo, hi) kept, the footer's line last."""

    index: DigestIndex
    kept: list[tuple[int, int]] = field(default_factory=list)
    left_out: list[tuple[int, int]] = field(default_factory=list)
    cut: int | None = None  # where reading stops (a tail read in part)

    def left_out_counts(self, table: bytes) -> list[int]:
        """Per stretch left out, its records whose facts `table` maps to 1."""
        return [self.index.facts[lo:hi].translate(table).count(1) for lo, hi in self.left_out]


@dataclass
class _Plan:
    a: _Side
    b: _Side
    tail: tuple[int, int] | None


def _plan(ia: DigestIndex, ib: DigestIndex, tail_records: int) -> _Plan | None:
    stretches, tail = identical_stretches(_matchable(ia, "a"), _matchable(ib, "b"))
    left_out = [Stretch(s.a + CONTEXT, s.b + CONTEXT, s.length - 2 * CONTEXT) for s in stretches
                if s.length - 2 * CONTEXT >= _MIN_LEFT_OUT]
    if sum(s.length for s in left_out) < _WORTHWHILE * len(ia):
        return None
    a, b = _Side(ia), _Side(ib)
    for side, starts in ((a, [s.a for s in left_out]), (b, [s.b for s in left_out])):
        side.left_out = [(lo, lo + s.length) for lo, s in zip(starts, left_out)]
    if tail is not None:
        _cut_tail(a, b, tail, tail_records)
    for side in (a, b):
        side.kept = _complement(side.left_out, side.cut if side.cut is not None else len(side.index) - 1)
        side.kept.append((len(side.index) - 1, len(side.index)))  # the footer
    return _Plan(a, b, tail)


def _cut_tail(a: _Side, b: _Side, tail: tuple[int, int], tail_records: int) -> None:
    """Read only the first `tail_records` of A's tail (B's in proportion), where nothing past them must be read."""
    last_a, last_b = len(a.index) - 1, len(b.index) - 1  # the footers
    rest_a, rest_b = last_a - tail[0], last_b - tail[1]
    if rest_a <= tail_records:
        return
    cut_a = tail[0] + tail_records
    cut_b = min(last_b, tail[1] + math.ceil(tail_records * rest_b / rest_a) + tail_records // 10)
    if 1 in a.index.facts[cut_a:last_a].translate(_TAIL_TABLE) or 1 in b.index.facts[cut_b:last_b].translate(_TAIL_TABLE):
        return
    a.cut, b.cut = cut_a, cut_b


def _complement(left_out: list[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    kept, at = [], 0
    for lo, hi in left_out:
        if lo >= end:
            break
        if lo > at:
            kept.append((at, lo))
        at = hi
    if at < end:
        kept.append((at, end))
    return kept


# Bytes copied at once: kept ranges can be long (a tail read whole).
_COPY_BYTES = 1 << 24


def _write_kept(trace: Path, side: _Side, out: Path, wanted: set[int]) -> dict[int, bytes]:
    """The trace's header and kept lines written to `out`; returns the lines numbered in `wanted` (kept or not). A
    plain trace is read where it is kept; a compressed one, which cannot seek, is read through once."""
    index = side.index
    spans = [(index.start(lo), index.start(hi)) for lo, hi in side.kept]
    lines = {line: (index.start(line), index.start(line + 1)) for line in wanted}
    with open_bytes(trace) as src, open(out, "wb") as dst:
        dst.write(src.readline())
        if compression_of_file(trace) is Compression.NONE:
            for start, end in spans:
                src.seek(start)
                for at in range(start, end, _COPY_BYTES):
                    dst.write(src.read(min(_COPY_BYTES, end - at)))
            found: dict[int, bytes] = {}
            for line, (start, end) in lines.items():
                src.seek(start)
                found[line] = src.read(end - start)
            return found
        return _read_through(src, index.header_bytes, spans, lines, dst)


def _read_through(src: IO[bytes], position: int, spans: list[tuple[int, int]], lines: dict[int, tuple[int, int]],
                  dst: IO[bytes]) -> dict[int, bytes]:
    """One pass over a stream from `position`: the byte ranges `spans` written to `dst`, the `lines` collected."""
    pieces: dict[int, list[bytes]] = {line: [] for line in lines}
    starts = [start for start, _ in spans]
    while block := src.read(_COPY_BYTES):
        block_end = position + len(block)
        first = max(bisect.bisect_right(starts, position) - 1, 0)
        for start, end in spans[first:bisect.bisect_left(starts, block_end)]:
            if start < block_end and end > position:
                dst.write(block[max(start, position) - position:min(end, block_end) - position])
        for line, (start, end) in lines.items():
            if start < block_end and end > position:
                pieces[line].append(block[max(start, position) - position:min(end, block_end) - position])
        position = block_end
    return {line: b"".join(parts) for line, parts in pieces.items()}


@dataclass
class _Kept:
    """The kept records written as two traces, and what the result needs of what was left out."""

    a: Path
    b: Path
    op_lines_a: set[int]  # the ops A computes by line in records left out only
    alignable: tuple[int, int]  # alignable records left out, of A and B
    ops: tuple[int, int]  # op records left out
    # Per stretch left out: its alignable records, and the index of the first record after it.
    stretches: list[tuple[int, int | None]]
    last_needed: int | None  # with a tail read in part: the walk must stop by this record of A


def diff_by_shortcut(path_a: Path, path_b: Path, diff_files: DiffFiles,
                     progress: Progress | None = None) -> DiffResult | None:
    """The diff of two traces with digest indexes, reading what they do not hold alike; None where they have no
    index or too little alike (the caller diffs them whole)."""
    tail_records = TAIL_RECORDS
    with tempfile.TemporaryDirectory(prefix="tracediff-kept-") as folder:
        while True:
            kept = _write_what_differs(path_a, path_b, Path(folder), tail_records, progress)
            if kept is None:
                return None
            # The indexes are let go by now: the diff of the kept records runs in the memory they took.
            result = diff_files(kept.a, kept.b, kept.op_lines_a)
            if kept.last_needed is None or (result.read_to is not None and result.read_to <= kept.last_needed):
                _add_back(result, path_a, path_b, kept)
                return result
            tail_records *= 8  # the walk needed more of the tail


def _write_what_differs(path_a: Path, path_b: Path, folder: Path, tail_records: int,
                        progress: Progress | None) -> _Kept | None:
    """Both traces' kept records written to `folder`, and what the result will need of the rest; None where the
    traces have no index or too little alike."""
    ia = read_digest_index(path_a, (read_footer(path_a) or {}).get("records"), places=True)
    ib = read_digest_index(path_b, (read_footer(path_b) or {}).get("records"))
    if ia is None or ib is None:
        return None
    plan = _plan(ia, ib, tail_records)
    if plan is None:
        return None
    a, b = plan.a, plan.b
    wanted = _places_only_left_out(a)
    ends = [hi for _, hi in a.left_out]  # the first kept line after each stretch left out: its record index
    check_line = None if a.cut is None or plan.tail is None else plan.tail[0] + (a.cut - plan.tail[0]) * 3 // 4
    if progress is not None:
        progress(f"diff: {sum(hi - lo for lo, hi in a.left_out):,} of {len(a.index) - 1:,} records of A held alike "
                 f"by B, left out (digest indexes); diffing the other {sum(hi - lo for lo, hi in a.kept) - 1:,}"
                 + (" (the tail in part)" if a.cut is not None else ""))
    kept_a, kept_b = folder / "a.jsonl", folder / "b.jsonl"
    found = _write_kept(path_a, a, kept_a, wanted | set(ends) | ({check_line} if check_line is not None else set()))
    _write_kept(path_b, b, kept_b, set())
    alignable_a = a.left_out_counts(_ALIGNABLE_TABLE)
    return _Kept(kept_a, kept_b, {op_line_key(parse_line(found[line])) for line in wanted},
                 (sum(alignable_a), sum(b.left_out_counts(_ALIGNABLE_TABLE))),
                 (sum(a.left_out_counts(_OP_TABLE)), sum(b.left_out_counts(_OP_TABLE))),
                 [(count, _index_of(found.get(end, b""))) for count, end in zip(alignable_a, ends)],
                 None if check_line is None else _last_needed(found.get(check_line, b"")))


def _places_only_left_out(side: _Side) -> set[int]:
    """A line of each place (op, module, source line) that only records left out have: the walk asks whether A
    computes an op at a line, so those lines are read for their ops."""
    places = side.index.places
    assert places is not None
    known = set().union(*(set(places[lo:hi]) for lo, hi in side.kept))
    lines: set[int] = set()
    for lo, hi in side.left_out:
        new = set(places[lo:hi]) - known
        if new:
            first = dict(zip(reversed(places[lo:hi]), range(hi - 1, lo - 1, -1)))  # each place's first line here
            lines.update(first[place] for place in new)
            known |= new
    return lines


def _last_needed(line: bytes) -> int:
    """The index of the record by which the walk must stop (-1, none, if it has no index: read further)."""
    index = _index_of(line)
    return -1 if index is None else index


_INDEX_OF = re.compile(rb'\{"t":"\w+","i":(\d+)')


def _index_of(line: bytes) -> int | None:
    """The record index a line starts with (`{"t":"op","i":7,...`), if it has one."""
    match = _INDEX_OF.match(line)
    return int(match.group(1)) if match else None


def _add_back(result: DiffResult, path_a: Path, path_b: Path, kept: _Kept) -> None:
    """Counts of the records left out added to the kept records' result; the traces named as given."""
    result.a.path, result.b.path = Path(path_a), Path(path_b)
    result.a.length += kept.alignable[0]
    result.b.length += kept.alignable[1]
    result.a.ops += kept.ops[0]
    result.b.ops += kept.ops[1]
    result.paired += kept.alignable[0]
    for count, after in kept.stretches:
        if result.read_to is None or (after is not None and after <= result.read_to):
            result.compared += count
