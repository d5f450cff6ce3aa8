"""Turn a diff result (and the runs behind it) into the report: a plain dict.

This is the one place that decides the verdict and exit code. The dict is the
JSON contract of DESIGN.md (`verdict`, `exit_code`, `traces`,
`first_divergence` with `kind`, `op`, `index`, `source`, `module`,
`rel_diff`, `candidates`); everything else is extra.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tracediff.config import Config
from tracediff.diff.compare import TensorDiff
from tracediff.diff.engine import header_differences, program_differences
from tracediff.diff.nan import NanOrigin
from tracediff.diff.place import Place, draws_random
from tracediff.diff.verdict import DiffResult, Divergence
from tracediff.errors import ExitCode
from tracediff.outcome import RunResult


def _number(x: float | None) -> float | None:
    """JSON has no Infinity: report it as null (the comparison text says why)."""
    if x is None or not math.isfinite(x):
        return None
    return x


def _tensor(d: TensorDiff) -> dict[str, Any]:
    return {
        "side": d.side,
        "arg": d.arg,
        "dtype": d.dtype,
        "shape": list(d.shape),
        "fingerprint_a": d.a,
        "fingerprint_b": d.b,
        "rel_diff": _number(d.comparison.rel_diff),
        "statistic": d.comparison.statistic,
        "tolerance": {"rtol": d.comparison.tolerance.rtol, "atol": d.comparison.tolerance.atol},
        "comparison": d.comparison.describe(),
        "noise": d.comparison.noise,
        "above_noise": _number(d.comparison.above_noise),
    }


def _divergence(d: Divergence) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": d.kind,
        "op": d.a.op,
        "index": d.a.index,
        "source": d.a.source,
        "module": d.a.module,
        "rel_diff": _number(d.rel_diff),
        "candidates": [p.as_dict() for p in d.candidates],
        "pinned_by": pinned_by(d),
        "code": d.a.code,
        "path": d.a.path,
        "inputs_agree": d.inputs_agree,
        "may_start_earlier": d.may_start_earlier,
        "note": d.note,
        "observed": d.observed.as_dict() if d.observed else None,
        "b": d.b.as_dict() if d.b else None,
        "tensor": _tensor(d.worst) if d.worst else None,
    }
    return out


def pinned_by(d: Divergence) -> str | None:
    """How sure the location is: "value" (the op's own inputs agree and its outputs differ),
    "position" (the only op between agreeing values and the difference, or the op whose value B
    changed), or None (several candidates remain, or the difference grew from below the tolerance
    and may have been made before them)."""
    if d.kind == "structure" or len(d.candidates) != 1 or d.may_start_earlier:
        return None
    return "value" if d.inputs_agree and d.observed is None else "position"


def _place(p: Place | NanOrigin | None) -> dict[str, Any] | None:
    return p.as_dict() if p else None


def _run(run: RunResult | None, skeleton_footer: dict[str, Any] | None, truncated: bool, header: dict[str, Any]) -> dict[str, Any]:
    footer = skeleton_footer or {}
    info: dict[str, Any] = {
        "backend": header.get("backend"),
        "complete": not truncated,
        "ops": footer.get("ops"),
        "compile_calls": footer.get("compile_calls"),
        "error": footer.get("error"),
        "failure": None,
        # torch.compile options (mode=, options=) removed because this backend rejects them
        "dropped_compile_options": sorted(set(footer.get("dropped_compile_options") or ())),
    }
    if run is not None:
        info.update(returncode=run.returncode, timed_out=run.timed_out, elapsed_s=round(run.elapsed_s, 2), log=str(run.log),
                    output_tail=list(run.output_tail))
        info["failure"] = run.failure()
    if info["failure"] is None:
        if truncated:
            info["failure"] = "the trace ends without a footer: the run crashed or was killed"
        elif footer.get("error"):
            err = footer["error"]
            info["failure"] = f"the script raised {err.get('type')}: {err.get('message')}"
    return info


def build_report(
    result: DiffResult,
    traces: Sequence[str],
    config: Config,
    runs: Sequence[RunResult | None] = (None, None),
) -> dict[str, Any]:
    run_a = _run(runs[0], result.a.footer, result.a.truncated, result.a.header)
    run_b = _run(runs[1], result.b.footer, result.b.truncated, result.b.header)
    failed = [r for r in (run_a, run_b) if r["failure"]]
    first = result.first
    if failed:
        verdict, code = "failed", ExitCode.RUN_FAILED
    elif first is not None:
        verdict, code = "diverged", ExitCode.DIVERGED
    else:
        verdict, code = "match", ExitCode.MATCH

    notes: list[str] = []
    programs = program_differences(result.a.header, result.b.header)
    if programs:
        notes.append(f"the traces come from different programs ({'; '.join(programs)}): ops are paired across "
                     "two programs, so a difference (or a match) may say nothing about a compiler")
    for label, run in zip("AB", (run_a, run_b)):
        if run["dropped_compile_options"]:
            options = ", ".join(f"{k}=" for k in run["dropped_compile_options"])
            notes.append(f"run {label} ({run['backend']}): the script's torch.compile option(s) {options} were dropped "
                         f"because backend {run['backend']} rejects them (they are inductor's); "
                         "that run compiled without them")
    compile_calls = [r["compile_calls"] for r in (run_a, run_b)]
    compiled = any(compile_calls)
    if not compiled and not failed:
        notes.append("the script never reached torch.compile: both runs were plain eager, "
                     "so this comparison says nothing about a compiler")
    if result.paired == 0 and not failed:
        notes.append("no op of A could be paired with one of B: are these recordings of the same program?")
    if first is not None and draws_random(first.a.op):
        notes.append(f"{first.a.op} draws random numbers (dropout, sampling): its outputs "
                     "may differ because the two runs drew different ones (a compiled graph may consume the generator "
                     "in another order); check whether it repeats with dropout off (model.eval()) or p=0")
    amplified_note = result.amplified.note() if first is None and result.amplified is not None else None
    if amplified_note:
        notes.append(amplified_note)
    if first is None and (result.nan_origin_a or result.nan_origin_b):
        notes.append("both runs produce NaN/Inf (they agree); see nan_origin")
    children = max((footer or {}).get("child_processes") or 0 for footer in (result.a.footer, result.b.footer))
    if children:
        notes.append(f"{children} forked child process(es) (e.g. DataLoader workers) ran ops that are not recorded: "
                     "only the main process is traced")

    report = {
        "verdict": verdict,
        "exit_code": int(code),
        "traces": [str(t) for t in traces],
        "first_divergence": _divergence(first) if first else None,
        "inherited": result.inherited,
        "inherited_complete": result.inherited_complete,
        "compared": result.compared,
        "paired": result.paired,
        "unpaired": {"a": result.unpaired_a, "b": result.unpaired_b},
        "structure": {"count": result.structure_count, "examples": result.structure, "strict": config.strict_structure},
        "nan_origin": {"a": _place(result.nan_origin_a), "b": _place(result.nan_origin_b)},
        "compiled": compiled,
        "runs": [run_a, run_b],
        "header_differences": header_differences(result.a.header, result.b.header),
        "program_differences": programs,
        "tolerances": {k: {"rtol": v.rtol, "atol": v.atol} for k, v in config.tolerances.items()},
        "exact": config.exact,
        "notes": notes,
    }
    if result.noise is not None:
        report["calibration"] = dict(result.noise.summary(), passed_by_noise=result.passed_by_noise,
                                     max_above_noise_passed=round(result.closest_to_noise, 3))
    return report


def failed_run_report(traces: Sequence[str], runs: Sequence[RunResult], reason: str) -> dict[str, Any]:
    """The report when a run left no trace that can be read at all."""
    return {
        "verdict": "failed",
        "exit_code": int(ExitCode.RUN_FAILED),
        "traces": [str(t) for t in traces],
        "first_divergence": None,
        "runs": [
            {"backend": r.backend, "failure": r.failure(), "returncode": r.returncode, "timed_out": r.timed_out,
             "log": str(r.log), "output_tail": list(r.output_tail)}
            for r in runs
        ],
        "notes": [reason],
    }
