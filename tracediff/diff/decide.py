"""The verdict of a comparison as an `Outcome`: the one place that decides match, diverged or failed.

A diff result (and the runs behind it, where there were runs) in; the typed outcome out, whose
`to_json` is the report's JSON contract (docs/design.md §6). The stages after it (narrowing,
bisection, determinism advice, repeats) return new outcomes; the renderers in report/ only read them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tracediff.config import Config
from tracediff.diff.compare import TensorDiff
from tracediff.diff.engine import header_differences, program_differences
from tracediff.diff.place import draws_random
from tracediff.diff.same_inputs import SameInputFindings, WrongCall, read_findings, reference_index, rel_diff
from tracediff.diff.verdict import DiffResult
from tracediff.diff.verdict import Divergence as Found
from tracediff.op_names import UNINITIALIZED_OUTPUT_OPS, packet
from tracediff.outcome import (
    Cause,
    Comparison,
    Divergence,
    Outcome,
    RunResult,
    RunSummary,
    Site,
    TensorEvidence,
    Verdict,
)
from tracediff.trace.schema import Header


def _number(x: float | None) -> float | None:
    """JSON has no Infinity: report it as null (the comparison text says why)."""
    if x is None or not math.isfinite(x):
        return None
    return x


def _evidence(d: TensorDiff) -> TensorEvidence:
    c = d.comparison
    return TensorEvidence(d.side, d.arg, d.dtype, tuple(d.shape), d.a, d.b, _number(c.rel_diff), c.statistic,
                          c.tolerance.rtol, c.tolerance.atol, c.describe(), c.noise, _number(c.above_noise))


def pinned_by(d: Found) -> str | None:
    """How sure the location is: "value" (the op's own inputs agree and its outputs differ),
    "position" (the only op between agreeing values and the difference, or the op whose value B
    changed), or None (several candidates remain, or the difference grew from below the tolerance
    and may have been made before them)."""
    if d.kind == "structure" or len(d.candidates) != 1 or d.may_start_earlier:
        return None
    return "value" if d.inputs_agree and d.observed is None else "position"


def _cause(d: Found) -> Cause:
    """An output difference made where uninitialized memory (`torch.empty`) is among the ops named reads
    garbage; one whose input no op of A made is a program input."""
    if d.kind == "output" and any(packet(p.op) in UNINITIALIZED_OUTPUT_OPS for p in (d.a, *d.candidates)):
        return Cause.UNINITIALIZED_MEMORY
    return Cause.PROGRAM_INPUT if d.program_input else Cause(d.kind)


def divergence(d: Found) -> Divergence:
    return Divergence(_cause(d), Site(d.a.op, d.a.index, d.a.source, d.a.module, d.a.code), _number(d.rel_diff),
                      tuple(Site(**p.as_dict()) for p in d.candidates), pinned_by(d), d.a.path, d.inputs_agree,
                      d.may_start_earlier, d.note, Site(**d.observed.as_dict()) if d.observed else None,
                      Site(**d.b.as_dict()) if d.b else None, _evidence(d.worst) if d.worst else None, rule=d.rule)


def same_input_divergence(wrong: WrongCall, trace_a: str | None = None) -> Divergence:
    """The first divergence where a compiled call was wrong on its own inputs: the op the prefix search found
    (pinned on the same inputs), or the call alone where it could not narrow."""
    worst = wrong.outputs[0].measurement
    cause = Cause.NAN if worst.nonfinite else Cause.OUTPUT
    judged = {"output": worst.name, "dtype": worst.dtype, "kind": wrong.outputs[0].judgement.kind,
              "why": wrong.outputs[0].judgement.why}
    culprit = wrong.culprit
    note = wrong.describe()
    if culprit is None:
        searched = wrong.check.get("culprit") or {}
        if searched.get("note"):
            note += f"; the op inside it was not found ({searched['note']})"
        # The call itself, at the program's line that made it.
        called = wrong.check.get("site") or {}
        site = Site(f"compiled call of {wrong.check.get('g')}", None, called.get("src"), wrong.check.get("m"),
                    called.get("code"))
        return Divergence(cause, site, rel_diff(worst), (), None, called.get("path"), True, False, note, None, None,
                          None, judged=judged, rule="compiled_call_wrong_on_its_own_inputs")
    index = reference_index(trace_a, wrong) if trace_a else None
    site = Site(culprit["op"], index, culprit.get("src"), culprit.get("m"), culprit.get("code"))
    if culprit.get("note"):
        note += f"; {culprit['note']}"
    if wrong.phase != "forward":
        note += f"; the op's backward, as the compiled backward computes it ({culprit['op']} is its forward op)"
    # Unconfirmed: wrong as a prefix's end, right inside the whole graph (record/judging/prefix.py): not pinned.
    pinned = None if culprit.get("unconfirmed") else "same_inputs"
    return Divergence(cause, site, rel_diff(worst), (site,), pinned, culprit.get("path"), True, False, note,
                      None, None, None, judged=judged, rule="wrong_on_its_own_inputs")


def _drift(found: Found) -> dict[str, Any]:
    """Where two runs whose compiled calls were all right drift apart, as the trace rules see it."""
    return {"op": found.a.op, "index": found.a.index, "source": found.a.source, "module": found.a.module,
            "rel_diff": _number(found.rel_diff)}


def _drift_note(found: Found, findings: SameInputFindings, inherited: int) -> str:
    rel = f"{found.rel_diff:.3g}" if found.rel_diff is not None and math.isfinite(found.rel_diff) else "far"
    where = f" at {found.a.source}" if found.a.source else ""
    return (f"the runs drift apart from {found.a.op}{where} (#{found.a.index}; relative difference {rel}; "
            f"{inherited} later record(s) differ too), yet each of the {findings.summary()} is as close to "
            "float64 as eager on its own inputs: rounding the program amplified (an optimizer's step, a long "
            "loop), not the compiler")


def _run(run: RunResult | None, footer: Mapping[str, Any] | None, truncated: bool, header: Mapping[str, Any]) -> RunSummary:
    footer = footer or {}
    failure = run.failure() if run is not None else None
    if failure is None:
        if truncated:
            failure = "the trace ends without a footer: the run crashed or was killed"
        elif footer.get("error"):
            err = footer["error"]
            failure = f"the script raised {err.get('type')}: {err.get('message')}"
    summary = RunSummary(header.get("backend"), failure, not truncated, footer.get("ops"), footer.get("compile_calls"),
                         footer.get("error"),
                         # torch.compile options (mode=, options=) removed because this backend rejects them
                         tuple(sorted(set(footer.get("dropped_compile_options") or ()))), has_process=run is not None)
    if run is None:
        return summary
    return replace(summary, returncode=run.returncode, timed_out=run.timed_out, elapsed_s=round(run.elapsed_s, 2),
                   log=str(run.log), output_tail=tuple(run.output_tail))


def decide(result: DiffResult, traces: Sequence[str], config: Config,
           runs: Sequence[RunResult | None] = (None, None), determinism_check: bool = False) -> Outcome:
    """`determinism_check`: two runs of one backend, where no compiler is in question."""
    run_a = _run(runs[0], result.a.footer, result.a.truncated, result.a.header)
    run_b = _run(runs[1], result.b.footer, result.b.truncated, result.b.header)
    failed = any(r.failure for r in (run_a, run_b))
    first = result.first
    verdict = Verdict.FAILED if failed else Verdict.DIVERGED if first is not None else Verdict.MATCH
    # B judged on its own inputs: its checks decide; the trace rules' finding is drift where every call was right.
    findings = None if determinism_check or not config.same_inputs else read_findings(result.b.checks, config, result.b.footer)
    drift = None
    if findings is not None and findings.judged:
        if findings.first_wrong is None and first is not None:
            drift = first
        first = None
        if not failed:
            verdict = Verdict.DIVERGED if findings.first_wrong is not None else Verdict.MATCH
    programs = program_differences(result.a.header, result.b.header)
    notes = _notes(result, (run_a, run_b), first, findings, drift, programs, failed, determinism_check)
    if verdict is Verdict.DIVERGED and findings is None and config.same_inputs and not determinism_check \
            and _compiled_unjudged(run_b, result.b.header):
        notes.append(f"B's compiled calls were not judged on their own inputs, so this verdict is the trace rules' "
                     f"alone: over many training steps, rounding an optimizer amplifies can look like this. "
                     f"`tracediff run`, or B recorded with `tracediff record --backend {run_b.backend} --same-inputs`, "
                     f"tells a compiler's error from drift")
    comparison = Comparison(
        result.inherited, result.inherited_complete, result.compared, result.paired, result.unpaired_a,
        result.unpaired_b, result.structure_count, tuple(result.structure), config.strict_structure,
        result.nan_origin_a.as_dict() if result.nan_origin_a else None,
        result.nan_origin_b.as_dict() if result.nan_origin_b else None, any(r.compile_calls for r in (run_a, run_b)))
    calibration = None
    if result.noise is not None:
        calibration = dict(result.noise.summary(), passed_by_noise=result.passed_by_noise,
                           max_above_noise_passed=round(result.closest_to_noise, 3))
    return Outcome(verdict, tuple(str(t) for t in traces), _first_divergence(first, findings, result.first, traces),
                   (run_a, run_b), tuple(notes), comparison, tuple(header_differences(result.a.header, result.b.header)),
                   tuple(programs), {k: {"rtol": v.rtol, "atol": v.atol} for k, v in config.tolerances.items()},
                   config.exact, calibration, same_inputs=findings.to_json() if findings else None,
                   drift=_drift(drift) if drift is not None else None)


def _compiled_unjudged(run: RunSummary, header: Header) -> bool:
    """Did `run` compile with a backend whose calls can be judged (not eager's, not dynamo's own), unjudged?"""
    return bool(run.compile_calls) and run.backend not in (None, "eager", "dynamo") and not header.get("judged")


def _first_divergence(first: Found | None, findings: SameInputFindings | None, by_traces: Found | None,
                      traces: Sequence[str]) -> Divergence | None:
    """The report's first divergence: the trace rules' (`first`), unless a judged call was wrong: then that
    call's, or where its culprit did not hold up in the region's first call, the traces' own finding."""
    if findings is None or not findings.judged or findings.first_wrong is None:
        return divergence(first) if first else None
    wrong = findings.first_wrong
    judged = same_input_divergence(wrong, str(traces[0]) if traces else None)
    first_call = wrong.check.get("call") == 0 and (wrong.check.get("rc") or [None, 0])[1] == 0
    if judged.pinned_by is None and (wrong.culprit or {}).get("unconfirmed") and first_call and by_traces is not None:
        # The prefix search's op did not hold up inside the whole graph; in the region's first call (no drift
        # from an earlier step yet) the traces' own finding names the place, the judged call with it.
        named = divergence(by_traces)
        return replace(named, note=f"{named.note}; {wrong.describe()}", judged=judged.judged)
    return judged


def _notes(result: DiffResult, runs: tuple[RunSummary, RunSummary], first: Found | None,
           findings: SameInputFindings | None, drift: Found | None, programs: list[str], failed: bool,
           determinism_check: bool) -> list[str]:
    """What a reader of the verdict should know besides it, in the report's order."""
    notes: list[str] = []
    if programs:
        notes.append(f"the traces come from different programs ({'; '.join(programs)}): ops are paired across "
                     "two programs, so a difference (or a match) may say nothing about a compiler")
    for label, run in zip("AB", runs):
        if run.dropped_compile_options:
            options = ", ".join(f"{k}=" for k in run.dropped_compile_options)
            notes.append(f"run {label} ({run.backend}): the script's torch.compile option(s) {options} were dropped "
                         f"because backend {run.backend} rejects them (they are inductor's); "
                         "that run compiled without them")
    if not any(r.compile_calls for r in runs) and not failed and not determinism_check:
        notes.append("the script never reached torch.compile: both runs were plain eager, "
                     "so this comparison says nothing about a compiler")
    notes += _pairing_notes(result, failed)
    if first is not None and draws_random(first.a.op):
        notes.append(f"{first.a.op} draws random numbers (dropout, sampling): its outputs "
                     "may differ because the two runs drew different ones (a compiled graph may consume the generator "
                     "in another order); check whether it repeats with dropout off (model.eval()) or p=0")
    notes += _judging_notes(result, first, findings, drift)
    if first is None and (result.nan_origin_a or result.nan_origin_b):
        notes.append("both runs produce NaN/Inf (they agree); see nan_origin")
    footers = (result.a.footer, result.b.footer)
    for label, footer in zip("AB", footers):
        failures = (footer or {}).get("recorder_failures")
        if failures:
            notes.append(f"run {label}: tracediff failed to record {failures.get('count')} op(s), its own failure, not "
                         f"the script's (the first: {failures.get('first')}); they are missing from the trace")
    children = max((footer or {}).get("child_processes") or 0 for footer in footers)
    if children:
        notes.append(f"{children} forked child process(es) (e.g. DataLoader workers) ran ops that are not recorded: "
                     "only the main process is traced")
    return notes


def _pairing_notes(result: DiffResult, failed: bool) -> list[str]:
    """Nothing paired: two programs, or nothing recorded."""
    # A light recording (record/scope.py) holds compiled calls only: none paired is a script that never compiled.
    calls_only = any((h.get("scope") or {}).get("kind") == "calls" for h in (result.a.header, result.b.header))
    recorded = sum((footer or {}).get("ops", 0) + (footer or {}).get("kernels", 0)
                   for footer in (result.a.footer, result.b.footer))
    if result.paired != 0 or failed or calls_only:
        return []
    return ["no op of A could be paired with one of B: are these recordings of the same program?" if recorded
            else "neither run recorded any tensor op: the script ended before its work (an early "
                 "`sys.exit(0)`, a `__main__` guard that did not run?), so there was nothing to compare"]


def _judging_notes(result: DiffResult, first: Found | None, findings: SameInputFindings | None,
                   drift: Found | None) -> list[str]:
    """Amplified noise, drift, and the calls the judge could not judge or skipped."""
    notes: list[str] = []
    amplified_note = result.amplified.note() if first is None and result.amplified is not None else None
    if amplified_note and (findings is None or not findings.judged):
        notes.append(amplified_note)
    if findings is None:
        return notes
    if drift is not None:
        notes.append(_drift_note(drift, findings, result.inherited))
    elif findings.judged and findings.first_wrong is None:
        notes.append(f"each of the {findings.summary()} is as close to float64 as eager on its own inputs")
    if findings.unjudged_note():
        notes.append(str(findings.unjudged_note()))
    if findings.first_wrong is None and findings.skipped_note():
        notes.append(str(findings.skipped_note()))
    return notes


def unreadable(traces: Sequence[str], runs: Sequence[RunResult], reason: str) -> Outcome:
    """The outcome when a run left no trace that can be read at all."""
    summaries = tuple(RunSummary(r.backend, r.failure(), returncode=r.returncode, timed_out=r.timed_out, log=str(r.log),
                                 output_tail=tuple(r.output_tail)) for r in runs)
    return Outcome(Verdict.FAILED, tuple(str(t) for t in traces), None, summaries, (reason,), None)
