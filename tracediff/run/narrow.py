"""Narrow a divergence that stops at a fused kernel down to one op.

When the first divergence is localized only to the ops of a fused inductor
kernel, re-run the compiled side with one kernel per op (record/materialize)
and diff again. If the divergence persists and is now pinned to one of the
original candidates, that op is the answer; if it disappears or moves, the
report says so instead of guessing (e.g. the fault depends on fusion).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tracediff.config import Config
from tracediff.diff.engine import diff_traces
from tracediff.errors import TraceFormatError
from tracediff.report.build import build_report
from tracediff.run.launcher import RunResult, record_in_subprocess, trace_name

METHOD = "re-ran the compiled side with one inductor kernel per op (every intermediate materialized)"


def needs_narrowing(report: dict[str, Any], backend: str) -> bool:
    first = report.get("first_divergence")
    return bool(first) and len(first.get("candidates") or []) > 1 and backend == "inductor" and report["verdict"] == "diverged"


def narrow(report: dict[str, Any], runs: list[RunResult], script: Path, script_args: list[str], config: Config,
           run_dir: Path, echo: Callable[[str], None]) -> dict[str, Any]:
    """Return `report` with its first divergence narrowed (or annotated why not)."""
    first = report["first_divergence"]
    candidates = first["candidates"]
    echo(f"tracediff: the divergence is inside a fused kernel ({len(candidates)} candidate ops); "
         "re-running with one kernel per op to find the one")
    trace = run_dir / f"{trace_name('c', runs[1].backend)}-unfused.jsonl"
    rerun = record_in_subprocess(
        script, script_args, backend=runs[1].backend, trace=trace, seed=config.seed, exact=config.exact,
        fallback_random=config.fallback_random, timeout=config.timeout, echo=echo, materialize=True,
    )
    narrowing: dict[str, Any] = {"method": METHOD, "trace": str(trace), "fused_candidates": candidates}
    failure = rerun.failure()
    if failure:
        narrowing.update(result="failed", detail=failure)
        return _annotate(report, narrowing, f"narrowing failed ({failure}); candidates are the fused kernel's ops")
    try:
        noise_trace = (report.get("calibration") or {}).get("noise_trace")  # judged as the fused run was
        unfused = build_report(diff_traces(runs[0].trace, trace, config, noise_trace=noise_trace), [str(runs[0].trace), str(trace)],
                               config)
    except TraceFormatError as e:
        narrowing.update(result="failed", detail=str(e))
        return _annotate(report, narrowing, f"narrowing failed ({e})")
    found = unfused.get("first_divergence")
    indices = {c["index"] for c in candidates}
    if found is None:
        narrowing.update(result="vanished")
        return _annotate(report, narrowing, "with one kernel per op the runs match: the divergence depends on "
                         "fusion itself (e.g. precision of fused intermediates); candidates are the fused ops")
    if found["index"] not in indices or len(found.get("candidates") or []) != 1:
        narrowing.update(result="moved", unfused_first_divergence=found)
        return _annotate(report, narrowing, f"with one kernel per op the first divergence is {found['op']} at "
                         f"{found['source']} instead, outside this kernel's ops or not pinned; keeping the fused verdict")
    narrowing.update(result="pinned")
    return dict(report, first_divergence=dict(found, narrowing=narrowing))


def _annotate(report: dict[str, Any], narrowing: dict[str, Any], note: str) -> dict[str, Any]:
    first = dict(report["first_divergence"], narrowing=narrowing)
    return dict(report, first_divergence=first, notes=[*report.get("notes", []), note])
