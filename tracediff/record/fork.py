"""Forked children of the recorded process: never in its trace, but counted.

A child forked while recording (a DataLoader worker, a `multiprocessing` pool
with the fork context, `os.fork()`) inherits the whole recording: the dispatch
mode on its stack, the module hooks, the redirected `torch.compile`, the trace
file's descriptor (whose offset it shares with the parent) and the writer's
unflushed bytes. Left alone it writes its own ops into the parent's file.

Right after a fork, in the child, `ForkGuard` stops the recorder (every op
passes straight through) and points the child's copy of the trace descriptor
at /dev/null. The child's first op writes one byte to a pipe that the parent
reads when the recording ends: the footer's `child_processes` counts the
forked children that ran ops which are not in the trace. Spawned children
(a fresh interpreter) never load the recorder and are not counted.
"""

from __future__ import annotations

import functools
import os
import weakref

from tracediff.record.mode import TraceRecorder
from tracediff.trace.writer import TraceWriter


def _after_fork_in_child(guard_ref: weakref.ref[ForkGuard]) -> None:
    guard = guard_ref()
    if guard is not None:
        guard.after_fork_in_child()


class ForkGuard:
    """Context manager: while active, forked children record nothing and write nothing to the trace."""

    def __init__(self, recorder: TraceRecorder, writer: TraceWriter) -> None:
        self.recorder = recorder
        self.writer = writer
        self.children = 0  # forked children that ran ops, known once the guard exits
        self._active = False
        self._in_child = False
        self._pipe: tuple[int, int] | None = None  # (read end, write end), both non-blocking

    def __enter__(self) -> ForkGuard:
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)  # a full pipe drops a count rather than block a child
        self._pipe = (read, write)
        self._active = True
        # There is no unregistering: the handler holds the guard weakly and does nothing once it exits.
        os.register_at_fork(after_in_child=functools.partial(_after_fork_in_child, weakref.ref(self)))
        return self

    def __exit__(self, *exc: object) -> None:
        self._active = False
        if self._pipe is None:
            return
        read, write = self._pipe
        self._pipe = None
        try:
            if not self._in_child:  # a child that got here must not take the parent's counts
                self.children += _drain(read)
        finally:
            os.close(read)
            os.close(write)

    def after_fork_in_child(self) -> None:
        """Runs in every forked child (and grandchild) while the guard is active."""
        if not self._active:
            return
        self._in_child = True
        try:
            self.writer.silence_in_child()
        except OSError:
            pass  # no /dev/null: the recorder is stopped below and writes nothing anyway
        self.recorder.stop_in_child(self._report_child)

    def _report_child(self) -> None:
        if self._pipe is None:
            return
        try:
            os.write(self._pipe[1], b".")
        except OSError:  # pipe full (tens of thousands of children): the count is a lower bound
            pass


def _drain(fd: int) -> int:
    """Bytes waiting in the non-blocking pipe `fd`."""
    total = 0
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return total
        if not chunk:
            return total
        total += len(chunk)
