"""Which compiled calls the judge re-runs: every one, those a time budget allows, or those of one window.

Judging a call costs its two references (the uncompiled graph, and again in float64) on top of the compiled
code: several times the call itself where the compiled code is fast. A run of thousands of steps judged in
full would take as many times longer; the light mode judges within a budget instead. The first call of each
graph is always judged (a recompile from step N on is a new graph, judged at once); after it, a call is judged
while the time spent judging stays below `ratio` times the program's own time, so the judged calls spread
evenly over the run. The calls judged and seen are counted for the verdict to say.
"""

from __future__ import annotations

import time
from typing import Any

from tracediff.record.scope import CallWindow

# The light mode's budget: judging may take this fraction of the program's own time (the target is a run at
# most twice as long as the compiled run alone; recording the compiled regions costs a little too).
LIGHT_BUDGET = 0.6


class JudgePolicy:
    """Every call judged; subclasses choose fewer. Counts the calls seen and judged (forward calls)."""

    kind = "every call"

    def __init__(self) -> None:
        self.seen = 0
        self.judged = 0
        self.spent_s = 0.0  # time spent judging

    def admits(self, graph: str, call: int, where: tuple[str, int] | None) -> bool:
        """Whether the `call`-th call of `graph`, made in region call `where`, is judged; counted either way."""
        self.seen += 1
        admitted = self._admits(graph, call, where)
        self.judged += admitted
        return admitted

    def _admits(self, graph: str, call: int, where: tuple[str, int] | None) -> bool:
        return True

    def spend(self, seconds: float) -> None:
        self.spent_s += seconds

    def summary(self) -> dict[str, Any]:
        """For the trace's footer: how many forward calls were judged of those made, and under which policy."""
        return {"policy": self.kind, "calls": self.seen, "judged": self.judged, "spent_s": round(self.spent_s, 3)}


class TimeBudget(JudgePolicy):
    """Each graph's first call, then calls while judging has taken at most `ratio` of the program's own time."""

    kind = "time budget"

    def __init__(self, ratio: float = LIGHT_BUDGET) -> None:
        super().__init__()
        self.ratio = ratio
        self.started = time.perf_counter()

    def _admits(self, graph: str, call: int, where: tuple[str, int] | None) -> bool:
        if call == 0:
            return True
        program_s = time.perf_counter() - self.started - self.spent_s
        return self.spent_s <= self.ratio * program_s


class InWindow(JudgePolicy):
    """Only the calls made inside one call of a compiled region (the window recorded in depth)."""

    kind = "window"

    def __init__(self, window: CallWindow) -> None:
        super().__init__()
        self.window = window

    def _admits(self, graph: str, call: int, where: tuple[str, int] | None) -> bool:
        return where is not None and where[0] == self.window.region and where[1] == self.window.call
