"""What a recorded run came to, as the report needs it.

Types only: every stage above (the launcher that makes a `RunResult`, the report
that renders it) imports this module, and it imports nothing of tracediff's but
the exit codes.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracediff.errors import ExitCode


@dataclass(frozen=True)
class RunResult:
    backend: str | None
    trace: Path
    log: Path
    returncode: int
    timed_out: bool
    elapsed_s: float
    error: dict[str, Any] | None = None  # the trace footer's `error`: what the script raised, if it did
    output_tail: tuple[str, ...] = ()  # the last lines the script printed (stdout and stderr, as relayed)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def failure(self) -> str | None:
        """One line on why this run failed, or None."""
        if self.timed_out:
            return f"run with backend {self.backend} timed out after {self.elapsed_s:.0f} s"
        if self.returncode == ExitCode.RUN_FAILED:
            return f"under backend {self.backend}, {_script_outcome(self.error, self.output_tail)} (see {self.log})"
        if self.returncode == ExitCode.USAGE:
            return _last_line(self.log)
        if self.returncode < 0:
            return f"run with backend {self.backend} was killed by {_signal_text(-self.returncode)} (see {self.log})"
        if self.returncode != 0:
            return f"run with backend {self.backend} exited with status {self.returncode} (see {self.log})"
        return None


def _script_outcome(error: dict[str, Any] | None, tail: tuple[str, ...]) -> str:
    """`the script raised ValueError: bad shape` or `the script exited with status 2: <its last line>`."""
    if error is None:
        return "the script failed" + (f": {tail[-1]}" if tail else "")
    message = str(error.get("message") or "")
    if error.get("type") == "SystemExit":
        # sys.exit(N), or sys.exit("text"): Python prints the text and exits with status 1
        status, text = (message, tail[-1] if tail else "") if message.lstrip("-").isdigit() else ("1", message)
        return f"the script exited with status {status}" + (f": {text}" if text else "")
    return f"the script raised {error.get('type')}" + (f": {message}" if message else "")


def _signal_text(number: int) -> str:
    """`signal SIGSEGV (11): a crash in native code`."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    why = {"SIGSEGV": "a crash in native code", "SIGBUS": "a crash in native code", "SIGILL": "a crash in native code",
           "SIGABRT": "aborted, e.g. a failed assertion in native code",
           "SIGKILL": "killed from outside, e.g. out of memory"}.get(name)
    return f"signal {name} ({number})" + (f": {why}" if why else "")


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "failed"
    return lines[-1].removeprefix("tracediff: ") if lines else "failed"
