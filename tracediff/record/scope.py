"""Which of the program's ops a recording keeps: every one, none (the light mode), or one call's window.

A run of thousands of steps is judged call by call without recording its ops (`calls`): the trace then holds
the compiled regions' calls with their inputs' and outputs' fingerprints, and the judge's checks. Around the
first wrong call, a second recording keeps every op of one window (`window`): from the start of one call of a
compiled region to the start of its next call, which in a training loop is one step (forward, backward and
optimizer step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracediff.errors import UserError


@dataclass(frozen=True)
class CallWindow:
    """One call of a compiled region, by the name and call number the recorder gives it (`Net.forward`, 57)."""

    region: str
    call: int

    def __str__(self) -> str:
        return f"{self.region}@{self.call}"

    @classmethod
    def parse(cls, text: str) -> CallWindow:
        """`Net.forward@57`, as `str` writes it."""
        region, at, call = text.rpartition("@")
        if not at or not region or not call.isdigit():
            raise UserError(f"a call window is REGION@CALL (e.g. Net.forward@57), got {text!r}")
        return cls(region, int(call))


@dataclass(frozen=True)
class RecordScope:
    """`all`: every op; `calls`: none, only compiled regions and checks; `window`: every op inside `window`."""

    kind: Literal["all", "calls", "window"] = "all"
    window: CallWindow | None = None

    @property
    def records_ops(self) -> bool:
        """Whether the recorder intercepts the program's ops at all (a dispatch mode costs every op)."""
        return self.kind != "calls"


class WindowState:
    """Where the program is with respect to a scope's window: before it, inside it, or past it."""

    def __init__(self, scope: RecordScope) -> None:
        self.window = scope.window if scope.kind == "window" else None
        self.open = self.window is None
        self.past = False

    def at_region_call(self, region: str, call: int) -> None:
        """A compiled region's call begins: the window opens at its own call and closes at the next one."""
        window = self.window
        if window is None or self.past or region != window.region:
            return
        if call == window.call:
            self.open = True
        elif call > window.call and self.open:
            self.open, self.past = False, True
