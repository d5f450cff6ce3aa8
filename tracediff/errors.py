"""The two kinds of failure, and the exit codes users and CI scripts rely on.

A `UserError` is something the user can fix (a missing file, a bad option):
the CLI prints its one-line message, no traceback, and exits 2. Anything else
that escapes is a bug in tracediff and keeps its traceback.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """The documented exit codes (DESIGN.md): one place, used everywhere."""

    MATCH = 0  # no divergence
    DIVERGED = 1  # divergence found
    USAGE = 2  # usage error or bad input file
    RUN_FAILED = 3  # a run itself failed: exception, crash, timeout


class UserError(Exception):
    """Bad input or usage: printed as one line, exit code 2."""

    exit_code = ExitCode.USAGE


class TraceFormatError(UserError):
    """A trace file that cannot be read: missing, empty, binary, not JSONL, wrong schema."""
