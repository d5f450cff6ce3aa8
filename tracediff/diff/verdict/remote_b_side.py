"""Trace B's side of the walk in a second process, for long traces.

Filing who made each of B's values (`BSide`) is about a quarter of a long walk's time, and needs only B's
records; the rules ask it something at a few records in a hundred, most at the first divergence. So a forked
process keeps the `BSide`, and the walk's process reads B itself only to compare its records: it tells that
process each call a `BSide` gets (advance, agree, stop filing), in order and in batches, and waits only for
the rules' questions. The other process makes exactly the calls the walk would have made, in the same
order, so every answer is the one a `BSide` in the walk's process gives.
"""

from __future__ import annotations

import multiprocessing
import signal
import traceback
from collections.abc import Collection, Iterator
from multiprocessing.connection import Connection
from typing import Any

from tracediff.diff.skeleton import alignable
from tracediff.diff.verdict.b_side import BRecords, BSide, Made
from tracediff.trace.reader import Trace
from tracediff.trace.schema import Tensor, TraceRecord

# Calls sent to the other process at a time (a batch is pickled whole: a few kB).
_BATCH = 512


class RemoteBSide(BRecords):
    """The `BSide` interface the rules use, with its tables in a forked process (`serve`)."""

    def __init__(self, path: Any, paired: bytearray, a_op_lines: set[int]) -> None:
        fork = multiprocessing.get_context("fork")
        self._conn, theirs = fork.Pipe()
        # Forked: the process inherits `paired` and `a_op_lines` as they are, unpickled.
        self._process = fork.Process(target=serve, args=(theirs, self._conn, path, paired, a_op_lines), daemon=True,
                                     name="tracediff-b-side")
        self._process.start()
        theirs.close()
        self._calls: list[tuple] = []
        super().__init__(_alignable(Trace(path)))

    def advance_to(self, j: int) -> Iterator[TraceRecord]:
        yield from super().advance_to(j)
        self._call("advance_to", j)

    def agree(self, record: TraceRecord, a_index: int, loose_args: Collection[str | None] = ()) -> None:
        assert record is self.current, "B's side agrees only on its current record"
        self._call("agree", a_index, frozenset(loose_args))

    def stop_filing(self) -> None:
        self._call("stop_filing")

    def producer(self, t: Tensor) -> Made | None:
        return self._ask("producer", t)

    def computing_producer(self, t: Tensor) -> Made | None:
        return self._ask("computing_producer", t)

    def walk_back(self, start: Tensor, through_loose: bool = False, through_updates: bool = False) -> list[Made]:
        return self._ask("walk_back", start, through_loose, through_updates)

    def recomputes(self, made: Made) -> bool:
        return self._ask("recomputes", made)

    def read_a_recomputed_value_of(self, made: Made, a_index: int) -> bool:
        return self._ask("read_a_recomputed_value_of", made, a_index)

    def read_the_value_of(self, made: Made, a_index: int) -> bool:
        return self._ask("read_the_value_of", made, a_index)

    def agreed_values_read(self, made: Made) -> list[int]:
        return self._ask("agreed_values_read", made)

    def close(self, check: bool = True) -> None:
        """End the other process (it also ends by itself when this one does). `check`: first make sure it made
        every call without an error (one it was never asked about would have gone unseen)."""
        try:
            if check:
                self._ask("healthy")
        finally:
            self._conn.close()
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()

    def _call(self, *call: Any) -> None:
        self._calls.append(call)
        if len(self._calls) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._calls:
            try:
                self._conn.send(self._calls)
            except OSError:  # a broken pipe: the other process is gone
                raise self._ended() from None
            self._calls = []

    def _ask(self, method: str, *args: Any) -> Any:
        self._call("ask", method, args)
        self._flush()
        try:
            ok, answer = self._conn.recv()
        except EOFError:
            raise self._ended() from None
        if not ok:
            raise RuntimeError(f"trace B's side of the walk failed:\n{answer}")
        return answer

    def _ended(self) -> RuntimeError:
        self._process.join(timeout=1)
        return RuntimeError(f"trace B's side of the walk ended (exit code {self._process.exitcode})")


def _alignable(trace: Trace) -> Iterator[TraceRecord]:
    return (record for record in trace if alignable(record))


def serve(conn: Connection, walks_end: Connection, path: Any, paired: bytearray, a_op_lines: set[int]) -> None:
    """The other process: a `BSide` making the calls it is sent, in order; answers the questions. It ends when
    the walk's end of the pipe closes, which it closes here first (forked, it holds a copy)."""
    walks_end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C interrupts the walk, which then closes this process
    b_side = BSide(path, paired, a_op_lines)
    failed: str | None = None  # the first call that raised: every later question is answered with it
    while True:
        try:
            calls = conn.recv()
        except EOFError:
            return  # the walk is over (or its process is gone)
        for kind, *args in calls:
            if kind == "ask":
                conn.send((False, failed) if failed is not None else _answer(b_side, *args))
            elif failed is None:
                try:
                    _make(b_side, kind, args)
                except Exception:
                    failed = traceback.format_exc()


def _make(b_side: BSide, kind: str, args: list[Any]) -> None:
    if kind == "advance_to":
        for _ in b_side.advance_to(args[0]):
            pass
    elif kind == "agree":
        assert b_side.current is not None
        b_side.agree(b_side.current, *args)
    elif kind == "stop_filing":
        b_side.stop_filing()
    else:
        raise ValueError(f"no such call: {kind}")


def _answer(b_side: BSide, method: str, args: tuple) -> tuple[bool, Any]:
    if method == "healthy":
        return True, None
    try:
        return True, getattr(b_side, method)(*args)
    except Exception:  # told to the walk, which raises it there
        return False, traceback.format_exc()
