"""The verdict from same-input checks: is some compiled call wrong on its own inputs?

A run recorded with the judge (record/judging/) holds a check record for each call of each compiled graph, forward and
backward: every output of the compiled code measured against eager and float64 on the very same inputs. Here
those measurements are judged with the user's tolerances. One wrong call makes the run DIVERGED, named by its
graph, call, output and (where the prefix search narrowed it) op and line. With every call right, a
difference between the two runs' traces is the program amplifying rounding, not the compiler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracediff.config import Config
from tracediff.errors import TraceFormatError
from tracediff.op_names import packet
from tracediff.trace.reader import Trace
from tracediff.trace.schema import OP, REGION, CheckRecord, Footer

if TYPE_CHECKING:  # judge/measure.py imports torch: a diff of traces without same-input checks never needs it
    from tracediff.judge.measure import Judgement, Measurement

_PHASES = {"fw": "forward", "bw": "compiled backward"}


@dataclass(frozen=True)
class WrongOutput:
    measurement: Measurement
    judgement: Judgement

    def to_json(self) -> dict[str, Any]:
        m = self.measurement
        return {"name": m.name, "dtype": m.dtype, "eager_dtype": m.eager_dtype, "shape": m.shape,
                "why": self.judgement.why, "kind": self.judgement.kind, "rel_diff": rel_diff(m)}


@dataclass(frozen=True)
class WrongCall:
    """The first compiled call found wrong on its own inputs."""

    check: CheckRecord
    outputs: tuple[WrongOutput, ...]

    @property
    def culprit(self) -> dict[str, Any] | None:
        culprit = self.check.get("culprit")
        return culprit if culprit and culprit.get("op") else None

    @property
    def phase(self) -> str:
        return _PHASES.get(self.check.get("ph", "fw"), str(self.check.get("ph")))

    @property
    def where(self) -> str:
        """`call 4 of Net.forward (region 0) graph 1 (Net.forward call 4)`: which call, i.e. which step."""
        region = self.check.get("rc")
        within = f" (in {region[0]} call {region[1]})" if region else ""
        return f"call {self.check.get('call')} of {self.check.get('g')}{within}"

    @property
    def precision_only(self) -> bool:
        """Every wrong output is the more precise one, grossly changed (judge/measure.py's "precision")."""
        return all(o.judgement.kind == "precision" for o in self.outputs)

    def describe(self) -> str:
        worst = self.outputs[0]
        advice = ("; the compiled result is the more precise one, yet the program's result changes with it "
                  "(under inductor, `torch._inductor.config.emulate_precision_casts = True` rounds as eager does)"
                  if self.precision_only else "")
        return (f"{self.where}, its {self.phase}, on its own inputs: "
                f"{worst.measurement.name} {worst.judgement.why}{advice}")

    def to_json(self) -> dict[str, Any]:
        region = self.check.get("rc")
        return {"graph": self.check.get("g"), "call": self.check.get("call"), "phase": self.phase,
                "region_call": {"name": region[0], "call": region[1]} if region else None,
                "at": self.check.get("at"), "outputs": [o.to_json() for o in self.outputs],
                "culprit": self.check.get("culprit")}


def left_out_by_policy(calls_made: int | None, calls: int, policy: str | None, unjudged_forward: int = 0) -> int:
    """Forward calls the policy chose not to judge (the light mode's budget, a window): none under a policy of
    every call, whose unjudged calls are failures to re-run. `calls_made` None: not counted (an older trace)."""
    if calls_made is None or policy == "every call":
        return 0
    return max(0, calls_made - calls - unjudged_forward)


@dataclass(frozen=True)
class SameInputFindings:
    """What the checks of one run came to."""

    calls: int  # forward checks
    backward_calls: int
    graphs: int
    wrong_calls: int
    first_wrong: WrongCall | None
    unjudged: int = 0  # calls that could not be re-run (a torch.func transform's inputs, a failing reference)
    unjudged_reason: str | None = None  # the first one's
    # Which calls were judged (record/judging/policy.py): "every call", "time budget" (the light mode), "window";
    # and how many forward calls the program made (None: not counted, a trace from before the count).
    policy: str = "every call"
    calls_made: int | None = None
    unjudged_forward: int = 0  # of `unjudged`, forward calls: made, and left out by a failure, not by the policy

    @property
    def left_out_by_policy(self) -> int:
        return left_out_by_policy(self.calls_made, self.calls, self.policy, self.unjudged_forward)

    @property
    def judged(self) -> bool:
        """Whether any call was judged: otherwise the traces alone must decide."""
        return self.calls + self.backward_calls > 0

    def to_json(self) -> dict[str, Any]:
        return {"calls": self.calls, "backward_calls": self.backward_calls, "graphs": self.graphs,
                "wrong_calls": self.wrong_calls, "unjudged": self.unjudged, "unjudged_reason": self.unjudged_reason,
                "policy": self.policy, "calls_made": self.calls_made,
                "first_wrong": self.first_wrong.to_json() if self.first_wrong else None}

    def unjudged_note(self) -> str | None:
        if not self.unjudged:
            return None
        return (f"{self.unjudged} compiled call(s) could not be judged on their own inputs (the first: "
                f"{self.unjudged_reason})" + ("" if self.judged else "; the traces alone decided"))

    def skipped_note(self) -> str | None:
        """Where calls were left unjudged by choice (the light mode's budget): what the verdict does not cover."""
        skipped = self.left_out_by_policy
        if not skipped:
            return None
        return (f"{skipped} of the {self.calls_made} compiled calls were not judged ({self.policy}): a fault in "
                "those alone would go unseen here (a fault in every call of a graph shows at its first call, which "
                "is always judged); `tracediff run` without --light judges every call")

    def summary(self) -> str:
        backward = f" and {self.backward_calls} compiled backward(s)" if self.backward_calls else ""
        sampled = ""
        if self.left_out_by_policy:
            sampled = f" (judged of {self.calls_made} made, within the light mode's {self.policy})" \
                if self.policy == "time budget" else f" (judged of {self.calls_made} made: those in the {self.policy})"
        return f"{self.calls} call(s) of {self.graphs} compiled graph(s){sampled}{backward}"


def rel_diff(m: Measurement) -> float | None:
    """How far the compiled output is from eager's, relative to the value's size (None: no number applies)."""
    if m.problem and not m.dist:
        return None
    scale = m.size or m.scale or m.scale_max
    return round(m.dist / scale, 6) if scale else None


def _wrong_outputs(check: CheckRecord, config: Config) -> list[WrongOutput]:
    from tracediff.judge.measure import Measurement, carried_tolerance, judge, tolerance_device

    wrong = []
    module = check.get("m")
    for record in check.get("outs") or ():
        m = Measurement.from_record(record)
        tolerance = carried_tolerance(m, config.tolerance_for(m.dtype, "", module, tolerance_device(m)),
                                      lambda dtype, device: config.tolerance_for(dtype, "", module, device))
        j = judge(m, tolerance)
        if j.wrong:
            wrong.append(WrongOutput(m, j))
    # The worst first: a wrong dtype or NaN, then further from float64, then the largest distance from eager.
    return sorted(wrong, key=lambda o: (o.measurement.problem is None, o.judgement.kind == "precision",
                                        -(rel_diff(o.measurement) or 0.0)))


def read_findings(checks: Sequence[CheckRecord], config: Config,
                  footer: Footer | None = None) -> SameInputFindings | None:
    """None for a trace without checks (recorded without the judge, or no compiled graph ran). `footer`: the trace's,
    which counts the calls made and judged."""
    if not checks:
        return None
    first: WrongCall | None = None
    wrong_calls = 0
    unjudged = [c for c in checks if c.get("unjudged")]
    judged = [c for c in checks if not c.get("unjudged")]
    judging = (footer or {}).get("judging") or {}
    for check in sorted(judged, key=lambda c: c.get("at", 0)):
        outputs = _wrong_outputs(check, config)
        if outputs:
            wrong_calls += 1
            if first is None:
                first = WrongCall(check, tuple(outputs))
    return SameInputFindings(
        calls=sum(1 for c in judged if c.get("ph") == "fw"),
        backward_calls=sum(1 for c in judged if c.get("ph") == "bw"),
        graphs=len({c.get("g") for c in judged}), wrong_calls=wrong_calls, first_wrong=first,
        unjudged=len(unjudged), unjudged_reason=str(unjudged[0]["unjudged"]) if unjudged else None,
        policy=str(judging.get("policy") or "every call"), calls_made=judging.get("calls"),
        unjudged_forward=sum(1 for c in unjudged if c.get("ph", "fw") == "fw"))


def reference_index(trace_a: str | Path, wrong: WrongCall) -> int | None:
    """The record of trace A (the eager run) that computes what the wrong call's culprit computes: its op at its
    line in the same call of the compiled region (the same step), or failing that the first op at that line; a
    backward culprit's op is A's backward record at that line. None where A has none (or cannot be read)."""
    culprit = wrong.culprit
    if culprit is None or not culprit.get("src"):
        return None
    region = wrong.check.get("rc")
    backward = wrong.check.get("ph") == "bw"
    family = packet(str(culprit.get("op")))
    calls: list[tuple[str, int]] = []
    best: tuple[int, int] | None = None  # (rank, index): lower rank is the better match
    try:
        for record in Trace(trace_a):
            kind = record.get("t")
            if kind == REGION:
                if record.get("ev") == "enter":
                    calls.append((str(record.get("name")), int(record.get("call") or 0)))
                elif calls:
                    calls.pop()
                continue
            if kind != OP or record.get("src") != culprit["src"]:
                continue
            in_call = region is not None and (tuple(region) in calls or (backward and bool(record.get("bw"))))
            rank = (0 if in_call else 2) + (0 if packet(str(record.get("op"))) == family else 1)
            if best is None or rank < best[0]:
                best = (rank, int(record["i"]))
                if rank == 0:
                    break
    except (OSError, TraceFormatError):
        return None
    return best[1] if best else None
