"""`tracediff run --light`: a long run checked call by call, its ops recorded in depth only where it went wrong.

Both runs are recorded without their ops: each trace holds the calls of the compiled regions (their inputs' and
outputs' fingerprints: the program's outputs step by step) and the candidate's same-input checks, made within
a time budget (record/judging/policy.py). Where no judged call is wrong, that is the verdict, with how far the
runs' outputs drifted. Where one is, both runs are recorded once more, every op kept but only inside that
call's window (record/scope.py): from the start of that call of its compiled region to the start of the next,
one step of a training loop. The report is then that window's, as a full recording's would be; the light
traces stay beside it for the drift plot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracediff.config import Config
from tracediff.diff.sample import AlignmentSample
from tracediff.outcome import Outcome, RunResult, Verdict
from tracediff.outputs import RunDir
from tracediff.record.scope import CallWindow
from tracediff.run.recording import compare_runs, record_run


def run_light(path: Path, script_args: list[str], backends: list[str], config: Config, run_dir: RunDir,
              echo: Callable[[str], None], sample: AlignmentSample | None = None) -> Outcome:
    """Both runs recorded as compiled calls only; where a judged call is wrong, its window recorded in depth."""
    reference, candidate = backends
    judge = config.same_inputs and reference != candidate
    calls_a = record_run(path, script_args, reference, run_dir.calls_trace('a', reference), config,
                         echo, light=True)
    calls_b = record_run(path, script_args, candidate, run_dir.calls_trace('b', candidate), config,
                         echo, judge=judge, light=True)
    outcome = compare_runs(calls_a, calls_b, config, echo)
    light = light_summary(outcome, (calls_a, calls_b))
    window = first_wrong_window(outcome)
    if outcome.verdict is not Verdict.DIVERGED or window is None:
        if sample is not None:  # the HTML report's alignment: these traces' (small: compiled calls only)
            outcome = compare_runs(calls_a, calls_b, config, lambda _: None, sample=sample)
        return replace(outcome, light=light)
    echo(f"tracediff: the first wrong call is in {window.region} call {window.call}: recording its ops in depth")
    deep_a = record_run(path, script_args, reference, run_dir.trace('a', reference), config, echo,
                        window=str(window))
    deep_b = record_run(path, script_args, candidate, run_dir.trace('b', candidate), config, echo,
                        judge=judge, window=str(window))
    deep = compare_runs(deep_a, deep_b, config, echo, sample=sample)
    light = dict(light, window=str(window))
    if deep.verdict is Verdict.DIVERGED and first_wrong_window(deep) == window:
        return replace(deep, light=light, notes=(*deep.notes, _window_note(window, light)))
    # Recorded again, the call was not wrong (a nondeterministic program, or a run that failed): the light verdict
    # stands, said with what the second recording gave.
    said = deep.runs[1].failure if deep.runs and deep.runs[1].failure else f"its verdict was {deep.verdict.value}"
    return replace(outcome, light=dict(light, window_verdict=deep.verdict.value),
                   notes=(*outcome.notes, f"recorded again in depth around {window.region} call {window.call}, the "
                          f"call was not found wrong ({said}): the verdict is the light run's"))


def first_wrong_window(outcome: Outcome) -> CallWindow | None:
    """The compiled region's call the first wrong call ran in (its step), from the same-input findings."""
    first = (outcome.same_inputs or {}).get("first_wrong") or {}
    region = first.get("region_call")
    if not region or region.get("name") is None or region.get("call") is None:
        return None
    return CallWindow(str(region["name"]), int(region["call"]))


def light_summary(outcome: Outcome, runs: tuple[RunResult, RunResult]) -> dict[str, Any]:
    """The `light` key of the report: the compiled-calls traces and how many calls were judged."""
    findings = outcome.same_inputs or {}
    return {"traces": [str(r.trace) for r in runs], "calls_made": findings.get("calls_made"),
            "calls_judged": findings.get("calls"), "policy": findings.get("policy"), "window": None}


def _window_note(window: CallWindow, light: dict[str, Any]) -> str:
    made = light.get("calls_made")
    judged = f"{light.get('calls_judged')} of {made}" if made is not None else str(light.get("calls_judged"))
    return (f"light mode: {judged} compiled call(s) judged on their own inputs without recording ops; the ops of "
            f"{window.region} call {window.call}, where the first wrong call ran, were then recorded in depth")
