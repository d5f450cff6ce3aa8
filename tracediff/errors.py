"""The kinds of failure, and the exit codes users and CI scripts rely on.

A `UserError` is something the user can fix (a missing file, a bad option, a
path that cannot be written): the CLI prints its one-line message, no
traceback, and exits 2. An `Interrupted` run (Ctrl-C) exits 130, as shells
report a command stopped by SIGINT, after one line saying where the partial
traces are. Anything else that escapes is a bug in tracediff and keeps its
traceback.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator


class ExitCode(enum.IntEnum):
    """The documented exit codes (docs/design.md §7, README): one place, used everywhere."""

    MATCH = 0  # no divergence
    DIVERGED = 1  # divergence found
    USAGE = 2  # usage error, bad input file, or an output path that cannot be written
    RUN_FAILED = 3  # a run itself failed: exception, non-zero exit, crash, timeout
    INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, what a shell reports for a command it interrupted


class UserError(Exception):
    """Bad input or usage: printed as one line, exit code 2."""

    exit_code = ExitCode.USAGE


class TraceFormatError(UserError):
    """A trace file that cannot be read: missing, empty, binary, not JSONL, wrong schema."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C while tracediff worked; `kept` says where the partial output is (exit 130).

    A KeyboardInterrupt, so code that cleans up on Ctrl-C still sees it as one.
    """

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, kept: str) -> None:
        super().__init__(kept)
        self.kept = kept


@contextlib.contextmanager
def interrupt_keeps(kept: str) -> Iterator[None]:
    """Turn a Ctrl-C inside the block into `Interrupted(kept)`; what a deeper block kept is said after it."""
    try:
        yield
    except Interrupted as e:
        raise Interrupted(f"{kept}; {e.kept}") from None
    except KeyboardInterrupt:
        raise Interrupted(kept) from None
