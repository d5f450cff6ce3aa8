"""A bounded sample of an alignment, for the visual report (report/html.py).

Pass 2 of a diff (diff/verdict/walk.py) tells an `AlignmentSample` about every row of
the alignment as it walks the traces: a pair of records with the relative
difference of their outputs, or a record that is only in A or only in B.
The diff of a million-op run must stay bounded in memory, so the sample
keeps only:

- the rows themselves when the whole alignment is small (`max_rows`);
  otherwise a window of `context` rows on each side of the row where the
  divergence was found (or, with no divergence, the first `max_rows` rows);
- the relative difference along the whole program, downsampled to at most
  `max_points` buckets of equal width in op index, each holding the largest
  difference in it (the worst is what a reader looks for);
- counts, so the page can say what it left out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from tracediff.diff.place import Place
from tracediff.trace.schema import Header, TraceRecord

AGREE = "agree"  # paired and compared: outputs within tolerance
DIFFER = "differ"  # paired and compared: outputs differ
UNCHECKED = "unchecked"  # paired, but not comparable (or ignored by the config)
ONLY_A = "only_a"
ONLY_B = "only_b"


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the side-by-side view: `n` is its position in the whole alignment."""

    n: int
    a: Place | None
    b: Place | None
    status: str
    rel_diff: float | None  # largest over the outputs compared; None when not compared

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "a": _place(self.a), "b": _place(self.b), "status": self.status, "rel_diff": self.rel_diff}


def _place(p: Place | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {**p.as_dict(), "path": p.path}


class Series:
    """Largest value per bucket of x, with the bucket width doubling whenever there are too many buckets."""

    def __init__(self, max_points: int) -> None:
        self.max_points = max_points
        self.width = 1
        self.points: list[list[float]] = []  # [bucket start x, largest y]
        self.count = 0

    def add(self, x: int, y: float) -> None:
        self.count += 1
        start = x - x % self.width
        if self.points and self.points[-1][0] == start:
            self.points[-1][1] = max(self.points[-1][1], y)
            return
        self.points.append([start, y])
        if len(self.points) > self.max_points:
            self._coarsen()

    def _coarsen(self) -> None:
        self.width *= 2
        merged: list[list[float]] = []
        for x, y in self.points:
            start = x - x % self.width
            if merged and merged[-1][0] == start:
                merged[-1][1] = max(merged[-1][1], y)
            else:
                merged.append([start, y])
        self.points = merged


class AlignmentSample:
    """Collects a bounded view of one diff's alignment (see the module docstring)."""

    def __init__(self, max_rows: int = 1500, context: int = 150, max_points: int = 1000) -> None:
        self.max_rows = max_rows
        self.context = context
        self.head: list[Row] = []
        self.before: deque[Row] = deque(maxlen=context + 1)
        self.after: list[Row] = []
        self.divergence_row: int | None = None  # row `n` at which the divergence was found
        self.rows_seen = 0
        self.counts = {AGREE: 0, DIFFER: 0, UNCHECKED: 0, ONLY_A: 0, ONLY_B: 0}
        self.series = Series(max_points)
        self.last_index_a = -1
        self.stopped_early = False
        self.headers: tuple[Header, Header] = ({}, {})

    # Called by the verdict's walk, in alignment order.
    def pair(self, record_a: TraceRecord, record_b: TraceRecord, rel_diff: float | None, status: str) -> None:
        if rel_diff is not None:
            self.series.add(record_a["i"], rel_diff)
        self._add(Place.of(record_a), Place.of(record_b), status, rel_diff)
        self.last_index_a = record_a["i"]

    def only_a(self, record_a: TraceRecord) -> None:
        self._add(Place.of(record_a), None, ONLY_A, None)
        self.last_index_a = record_a["i"]

    def only_b(self, record_b: TraceRecord) -> None:
        self._add(None, Place.of(record_b), ONLY_B, None)

    def diverged(self) -> None:
        """The divergence was found at the latest row; only the first call counts."""
        if self.divergence_row is None and self.rows_seen:
            self.divergence_row = self.rows_seen - 1

    def finish(self, headers: tuple[Header, Header], stopped_early: bool) -> None:
        self.headers = headers
        self.stopped_early = stopped_early

    def _add(self, a: Place | None, b: Place | None, status: str, rel_diff: float | None) -> None:
        row = Row(self.rows_seen, a, b, status, rel_diff)
        self.rows_seen += 1
        self.counts[status] += 1
        if len(self.head) < self.max_rows:
            self.head.append(row)
        if self.divergence_row is None:
            self.before.append(row)
        elif len(self.after) < self.context:
            self.after.append(row)

    def rows(self) -> list[Row]:
        """The rows to show: all of them if few, else the window around the divergence, else the head."""
        if self.rows_seen <= self.max_rows or self.divergence_row is None:
            return list(self.head)
        return [*self.before, *self.after]

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the renderer (which stays a pure function of dicts)."""
        rows = self.rows()
        return {
            "rows": [r.as_dict() for r in rows],
            "total_rows": self.rows_seen,
            "divergence_row": self.divergence_row,
            "counts": dict(self.counts),
            "series": {
                "points": [(int(x), y) for x, y in self.series.points],
                "bucket_width": self.series.width,
                "compared": self.series.count,
                "x_max": max(self.last_index_a, 0),
            },
            "stopped_early": self.stopped_early,
            "headers": [_header_summary(h) for h in self.headers],
        }


def _header_summary(header: Header) -> dict[str, Any]:
    keys = ("backend", "torch", "device", "command", "host", "python")
    return {k: header.get(k) for k in keys if header.get(k) is not None}
