"""`tracediff fix`: diagnose, then try changes until one makes the compiled run match eager, and time it.

1. The divergence, as `tracediff run` finds it (eager against the backend).
2. The changes of fix/plan.py, most local first, each verified by a recorded
   run of the script with the change made, diffed against the eager trace
   with the same tolerances. The search stops after the first reach (kind of
   change) at which one works: wider changes cost more speed.
3. Each change that works, and the compiled run without any, timed in an
   unrecorded run (record/call_timer.py). The answer is the fastest change that works.

Every run uses a private inductor and Triton cache, deleted at the end: the
changes compile code that must not stay in the user's caches.
"""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tracediff.config import Config
from tracediff.errors import ExitCode, interrupt_keeps
from tracediff.fix.changes import CUSTOMIZATION, NO_COMPILE, ROUNDING, Change, encode
from tracediff.fix.plan import plan
from tracediff.launch.launcher import check_script, record_in_subprocess
from tracediff.launch.recording import Recording
from tracediff.outcome import Outcome, RunResult, Verdict
from tracediff.outputs import RunDir, log_path
from tracediff.record.call_timer import ms_per_call
from tracediff.run.pipeline import run_and_diff
from tracediff.run.recording import compare_runs
from tracediff.trace.reader import Trace, read_footer

DEFAULT_MAX_RUNS = 8


@dataclass(frozen=True)
class Attempt:
    """One change tried: whether the compiled run then matched eager, and how fast it ran."""

    change: Change
    verdict: str  # "match" | "diverged" | "failed"
    seconds: float  # the recorded run and its diff
    trace: str
    failure: str | None = None
    ms_per_call: float | None = None  # timed where it works

    def to_json(self) -> dict[str, Any]:
        return {"change": self.change.to_json(), "description": self.change.describe(), "verdict": self.verdict,
                "seconds": round(self.seconds, 1), "trace": self.trace, "failure": self.failure,
                "ms_per_call": self.ms_per_call}


@dataclass(frozen=True)
class FixResult:
    """The diagnosis and the search: what `tracediff fix` reports."""

    outcome: Outcome  # eager against the backend, as `run` reports it
    backend: str
    attempts: tuple[Attempt, ...] = ()
    chosen: Attempt | None = None
    baseline_ms: float | None = None  # the compiled program without any change
    compiled_name: str = "model"  # what the script passes to torch.compile, for the patch
    stopped: str | None = None  # why the search ended before trying every change

    @property
    def exit_code(self) -> int:
        if self.outcome.verdict is Verdict.FAILED:
            return int(ExitCode.RUN_FAILED)
        if self.outcome.verdict is Verdict.MATCH or self.chosen is not None:
            return int(ExitCode.MATCH)
        return int(ExitCode.DIVERGED)

    def to_json(self) -> dict[str, Any]:
        report = self.outcome.to_json()
        report["exit_code"] = self.exit_code
        report["fix"] = self._fix_json()
        report["attempts"] = [a.to_json() for a in self.attempts]
        report["baseline_ms_per_call"] = self.baseline_ms
        report["fix_stopped"] = self.stopped
        return report

    def _fix_json(self) -> dict[str, Any] | None:
        chosen = self.chosen
        if chosen is None:
            return None
        slowdown = (round(chosen.ms_per_call / self.baseline_ms, 3)
                    if chosen.ms_per_call is not None and self.baseline_ms else None)
        return {"change": chosen.change.to_json(), "description": chosen.change.describe(),
                "patch": chosen.change.patch(self.compiled_name), "ms_per_call": chosen.ms_per_call,
                "baseline_ms_per_call": self.baseline_ms, "slowdown": slowdown,
                "nature": chosen.change.nature, "advice": advice(chosen.change, self.outcome)}


def advice(change: Change, outcome: Outcome) -> str:
    """Whether the difference looks like a compiler bug to report, expected rounding, or the script's own."""
    nature = change.nature
    if nature == CUSTOMIZATION:
        return ("the script's own compiler customization computes differently from eager: fix it, or keep it out "
                "of the compile as the patch does")
    if nature == ROUNDING:
        return ("expected rounding: the compiled code rounds intermediates differently from eager; the patch makes "
                "it round as eager does, or accept the difference with a wider tolerance")
    run_dir = outcome.run_dir or "<run dir>"
    return (f"looks like a compiler bug: the patch works around it; report it upstream with the standalone script "
            f"that `tracediff repro {run_dir}` writes")


def compiled_name(script: Path) -> str:
    """The expression the script passes to `torch.compile` where it is a plain name (`model`), else the
    name it assigns the compiled result to, else `model`."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return "model"
    for node in ast.walk(tree):
        call = node.value if isinstance(node, ast.Assign) else node
        if not (isinstance(call, ast.Call) and ast.unparse(call.func) in ("torch.compile", "compile") and call.args):
            continue
        if isinstance(call.args[0], ast.Name):
            return call.args[0].id
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            return node.targets[0].id
    return "model"


@contextlib.contextmanager
def private_caches() -> Iterator[str]:
    """Inductor's and Triton's caches in a fresh directory for every run started inside; removed after."""
    cache = tempfile.mkdtemp(prefix="tracediff-fix-cache-")
    saved = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    try:
        yield cache
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(cache, ignore_errors=True)


class _Search:
    """The runs of one search: recorded attempts (counted) and timing runs, all before the deadline."""

    def __init__(self, script: Path, script_args: list[str], backend: str, config: Config, run_dir: RunDir,
                 reference: Path, echo: Callable[[str], None], deadline: float) -> None:
        self.script, self.script_args, self.backend, self.config = script, script_args, backend, config
        self.run_dir, self.reference, self.echo = run_dir, reference, echo
        self.deadline = deadline
        self.runs = 0

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def recording(self, **changes: Any) -> Recording:
        timeout = max(1.0, min(self.config.timeout, self.left_s()))
        return replace(Recording.of(self.config, self.backend, **changes), timeout=timeout)

    def attempt(self, change: Change, number: int, total: int) -> Attempt:
        self.runs += 1
        started = time.perf_counter()
        trace = self.run_dir.fix_trace(number)
        self.echo(f"tracediff: fix {number}/{total}: {change.describe()}")
        reference = _reference_run(self.reference)
        if change.changes_eager:  # the pasted patch changes eager too: compare against eager with it
            eager_trace = self.run_dir.fix_trace(number, eager=True)
            reference = record_in_subprocess(self.script, self.script_args,
                                             replace(self.recording(fix=encode([change])), backend="eager"),
                                             eager_trace, echo=lambda _line: None)
        # Judged on its own inputs as the diagnosis was (record/judging/): a change is verified by the same verdict.
        run = record_in_subprocess(self.script, self.script_args,
                                   self.recording(fix=encode([change]), judge=self.config.same_inputs), trace,
                                   echo=lambda _line: None)
        failure = reference.failure() or run.failure()
        if failure:
            verdict = "failed"
        else:
            verdict = compare_runs(reference, run, self.config, lambda _line: None).verdict.value
        seconds = time.perf_counter() - started
        self.echo(f"tracediff: fix {number}/{total}: {verdict}" + (f" ({failure})" if failure else "")
                  + f" in {seconds:.1f} s")
        return Attempt(change, verdict, seconds, str(trace), failure)

    def time_calls(self, change: Change | None, label: str) -> float | None:
        """ms per call of the compiled program with `change` made (None: as compiled), unrecorded."""
        out, timing_trace = self.run_dir.timing(label)
        started = time.perf_counter()
        recording = self.recording(fix=encode([change]) if change else None, time_out=out)
        run = record_in_subprocess(self.script, self.script_args, recording, timing_trace,
                                   echo=lambda _line: None)
        ms = None if run.failure() else ms_per_call(out)
        shown = f"{ms:.3f} ms per call" if ms is not None else f"not timed ({run.failure() or 'no compiled call'})"
        self.echo(f"tracediff: timing {change.describe() if change else 'the compiled program as it is'}: "
                  f"{shown} ({time.perf_counter() - started:.1f} s)")
        return ms


def _reference_run(trace: Path) -> RunResult:
    """The eager run the diagnosis recorded, as `compare_runs` takes it."""
    return RunResult("eager", trace, log_path(trace), 0, False, 0.0)


def fix_script(script: str, script_args: list[str], backend: str, config: Config, out_dir: str | None,
               echo: Callable[[str], None], max_runs: int = DEFAULT_MAX_RUNS, timeout: float | None = None
               ) -> FixResult:
    """`tracediff fix`: the divergence of eager against `backend`, then the cheapest change that removes it.
    `timeout`: seconds for the whole search after the diagnosis (default: unlimited; each run keeps its own)."""
    path = check_script(script)
    with private_caches():
        outcome = run_and_diff(script, script_args, ["eager", backend], config, out_dir, echo)
        result = FixResult(outcome, backend, compiled_name=compiled_name(path))
        if outcome.verdict is Verdict.MATCH:
            rounding = (" (the runs drift apart by rounding, and every compiled call is right on its own inputs: "
                        "there is no compiler bug to work around)") if outcome.drift else ""
            return replace(result, outcome=replace(outcome, notes=(
                *outcome.notes, f"no divergence between eager and {backend}: nothing to fix{rounding}")))
        if outcome.verdict is not Verdict.DIVERGED or outcome.first_divergence is None:
            return result
        run_dir = RunDir(Path(str(outcome.run_dir)), config.compress)
        with interrupt_keeps(f"the diagnosis and the changes tried so far are in {run_dir}"):
            return _search(result, path, script_args, config, run_dir, echo, max_runs, timeout)


def _search(result: FixResult, path: Path, script_args: list[str], config: Config, run_dir: RunDir,
            echo: Callable[[str], None], max_runs: int, timeout: float | None) -> FixResult:
    outcome = result.outcome
    first = outcome.first_divergence
    assert first is not None
    reference, compiled = Path(outcome.traces[0]), Path(outcome.traces[1])
    footer = read_footer(compiled) or {}
    header = Trace(compiled).header
    changes = plan(first, result.backend, footer.get("compiler_customizations") or {},
                   str(header.get("device", "")).startswith("cuda"), header.get("settings") or {})
    deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
    search = _Search(path, script_args, result.backend, config, run_dir, reference, echo, deadline)
    echo(f"tracediff: fix: {len(changes)} changes to try, most local first (at most {max_runs} runs)")
    attempts: list[Attempt] = []
    stopped = None
    working_reach: int | None = None
    for number, change in enumerate(changes, 1):
        if working_reach is not None and change.reach > working_reach:
            break  # a wider change would cost more than the one that works
        if search.runs >= max_runs:
            stopped = f"--max-runs {max_runs} reached after {len(attempts)} of {len(changes)} changes"
            break
        if search.left_s() <= 0:
            stopped = f"--timeout reached after {len(attempts)} of {len(changes)} changes"
            break
        attempt = search.attempt(change, number, len(changes))
        attempts.append(attempt)
        if attempt.verdict == Verdict.MATCH.value and working_reach is None:
            working_reach = change.reach
    if stopped:
        echo(f"tracediff: fix: stopped: {stopped}")
    baseline = None
    ran = [a for a in attempts if a.verdict != "failed"]
    if ran and search.left_s() > 0:  # what each change costs, whether or not it works
        baseline = search.time_calls(None, "baseline")
        timed = {id(a): search.time_calls(a.change, f"{attempts.index(a) + 1:02d}") for a in ran
                 if search.left_s() > 0}
        attempts = [replace(a, ms_per_call=timed.get(id(a))) for a in attempts]
    working = [a for a in attempts if a.verdict == Verdict.MATCH.value]
    chosen = min(working, key=lambda a: (a.ms_per_call is None, a.ms_per_call or 0.0, a.change.reach), default=None)
    notes = [f"fix: {chosen.change.describe()} makes {result.backend} match eager"] if chosen else [
        f"fix: none of the {len(attempts)} changes tried makes {result.backend} match eager"]
    if any(a.change.kind == NO_COMPILE and a.verdict == Verdict.DIVERGED.value for a in attempts):
        notes.append("fix: even with nothing compiled the run differs from eager: the difference is not the "
                     "compiler's, no change to the compile can remove it (is the script deterministic? "
                     f"`tracediff run {outcome.script or 'SCRIPT'} --backends eager --repeat 2`)")
    final = replace(result, outcome=replace(outcome, notes=(*outcome.notes, *notes)), attempts=tuple(attempts),
                    chosen=chosen, baseline_ms=baseline, stopped=stopped)
    _write(final, run_dir)
    return final


def _write(result: FixResult, run_dir: RunDir) -> None:
    import json

    from tracediff.fix.render import render_fix

    report = result.to_json()
    run_dir.fix_json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    run_dir.fix_text.write_text(render_fix(report), encoding="utf-8")

