"""Narrow a divergence that stops at a fused kernel down to one op.

When the compiled side ran generated kernels (inductor, under whatever name:
`inductor`, a custom backend around `compile_fx`) and the first divergence is
localized only to several candidate ops, re-run the compiled side with one
kernel per op (record/materialize) and diff again:

- the unfused run diverges and, of its candidates, one op *computes* (the
  others only move values: a view cannot change one) and it is one of the
  fused candidates: that op is the answer (`pinned`). A decomposed op of A is
  several kernels of B but still one candidate of A;
- fewer computing candidates, all among the fused ones: `narrowed`;
- before every fused candidate, at one computing op: `earlier`, and that op is
  the answer. Fusion hid the difference there: the first value the fused run
  materializes after it (a layer norm's output, say) was still within the
  tolerance, and a later op showed it;
- elsewhere: `moved`, and the fused verdict stays;
- the runs match: `vanished`. The fused kernel's output differs from the same
  ops run one by one; a float64 run of the reference tells precision from a
  wrong result where the numbers allow it (diff/fusion.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from tracediff.config import Config
from tracediff.diff.decide import decide
from tracediff.diff.engine import diff_traces
from tracediff.diff.fusion import PRECISION, WRONG_RESULT, FusionEffect, judge_divergence
from tracediff.diff.precision import preserves_values
from tracediff.errors import TraceFormatError
from tracediff.launch.launcher import record_in_subprocess
from tracediff.launch.recording import Recording
from tracediff.outcome import Outcome, RunResult, Site, Verdict
from tracediff.outputs import RunDir
from tracediff.trace.reader import Trace, read_footer, records_at
from tracediff.trace.schema import KERNEL, TraceRecord

METHOD = "re-ran the compiled side with one inductor kernel per op (every intermediate materialized)"


def runs_generated_kernels(trace: Path) -> bool:
    """Did the run behind `trace` execute generated (inductor) kernels, whatever its backend's name?

    The footer counts them; a trace written before it did is read until the first one.
    """
    try:
        footer = read_footer(trace)
        if footer is not None and "kernels" in footer:
            return bool(footer["kernels"])
        return any(record["t"] == KERNEL for record in Trace(trace))
    except (OSError, TraceFormatError):
        return False


def needs_narrowing(outcome: Outcome, trace_b: Path) -> bool:
    """A divergence localized to several ops, to no line at all (a region's output differs and every
    value compared agreed: fused kernels kept the change unseen, within the tolerance at each), or to
    a line where a difference grew from below the tolerance (it may have been made inside a fused
    kernel before it), in a run whose compiled side ran generated kernels."""
    first = outcome.first_divergence
    if first is None or outcome.verdict is not Verdict.DIVERGED or (outcome.same_inputs or {}).get("first_wrong"):
        return False  # a same-input verdict was narrowed in the run itself (record/judging/prefix.py)
    unplaced = first.cause.kind == "output" and first.site.source is None
    unsure = len(first.candidates) > 1 or unplaced or first.may_start_earlier
    return unsure and runs_generated_kernels(trace_b)


@dataclass(frozen=True)
class Judgement:
    """What the unfused run says about the fused candidates."""

    result: str  # "vanished" | "pinned" | "narrowed" | "earlier" | "moved"
    pinned: dict[str, Any] | None = None  # the candidate pinned
    pinned_by: str | None = None  # "value": its inputs agree, its output differs; "position": the only op that computes
    computing: tuple[int, ...] = ()  # indices of the unfused run's candidates that compute
    shared: bool = False  # judged by the computing ops both runs' candidates hold


def judge_unfused(found: dict[str, Any] | None, fused: list[dict[str, Any]], moves: Callable[[int], bool],
                  feeds: Callable[[int], bool] = lambda _index: False) -> Judgement:
    """Compare the unfused run's first divergence (`found`) with the fused candidates.

    `moves(index)`: does A's record at `index` only move or widen values (never the one to blame)?
    `feeds(index)`: does it write a value a fused candidate reads (through candidate views)?
    """
    if found is None:
        return Judgement("vanished")
    candidates = found.get("candidates") or []
    computing = [c for c in candidates if not moves(c["index"])] or candidates
    indices = tuple(c["index"] for c in computing)
    fused_indices = {c["index"] for c in fused}
    by = "value" if len(candidates) == 1 and found.get("inputs_agree") else "position"  # if one op computes
    fused_computing = [c for c in fused if not moves(c["index"])] or fused
    # A difference that grew from below the tolerance may have been made before every candidate:
    # position alone pins nothing then.
    settled = not found.get("may_start_earlier")
    if not set(indices) <= fused_indices:
        # Before every fused candidate, or feeding one: the fused run saw that op's own output agree
        # and the change B made right after it inside the kernel (HF GPT-2: a pass's `mul` after
        # attention's `c_proj` mm, fused with the residual add and `ln_2`, within the tolerance there).
        if len(computing) == 1 and settled and (computing[0]["index"] < min(fused_indices)
                                                or feeds(computing[0]["index"])):
            return Judgement("earlier", computing[0], by, indices)
        # The unfused run names one of the fused kernel's ops, and holds ops after the kernel as candidates
        # too (a difference within the tolerance for a while shows a few ops later): the op to blame is
        # one of those both runs hold. Not when the unfused run names an op outside the kernel: then its
        # candidates need not hold the op to blame at all.
        shared = [c for c in computing if c["index"] in fused_indices] if found.get("index") in fused_indices else []
        if len(shared) == 1 and settled:
            return Judgement("pinned", shared[0], "position", (shared[0]["index"],), shared=True)
        if shared and len(shared) < len(fused_computing):
            return Judgement("narrowed", computing=tuple(c["index"] for c in shared), shared=True)
        return Judgement("moved", computing=indices)
    if len(computing) == 1 and settled:
        return Judgement("pinned", computing[0], by, indices)
    return Judgement("narrowed" if len(computing) < len(fused_computing) else "moved", computing=indices)


def feeds_a_candidate(records: dict[int, TraceRecord], fused: list[dict[str, Any]], moves: Callable[[int], bool],
                      index: int) -> bool:
    """Does A's record at `index` write a value that one of the `fused` candidates reads, directly or
    through candidates that only move values (a view)? `records`: A's records by index."""
    record = records.get(index)
    if record is None:
        return False
    values = {(t.get("id"), t.get("v")) for t in record.get("out", ())}
    for candidate in sorted(fused, key=lambda c: c["index"]):
        read = records.get(candidate["index"])
        if read is None or candidate["index"] <= index:
            continue
        if any((t.get("id"), t.get("v")) in values for t in read.get("in", ())):
            if not moves(candidate["index"]):
                return True
            values |= {(t.get("id"), t.get("v")) for t in read.get("out", ())}
    return False


def narrow(outcome: Outcome, runs: list[RunResult], script: Path, script_args: list[str], config: Config,
           run_dir: RunDir, echo: Callable[[str], None], record: Callable[..., RunResult] | None = None) -> Outcome:
    """`outcome` with its first divergence narrowed (or annotated why not). `record` runs the script
    as `launcher.record_in_subprocess` (the default) does; another one re-judges recordings already made."""
    record = record or record_in_subprocess
    first = outcome.first_divergence
    assert first is not None
    candidates = [c.to_json() for c in first.candidates]
    if len(candidates) > 1:
        echo(f"tracediff: the divergence is inside a fused kernel ({len(candidates)} candidate ops); "
             "re-running with one kernel per op to find the one")
    else:
        echo("tracediff: the difference grew from below the tolerance, perhaps inside fused kernels; "
             "re-running with one kernel per op to see where it was made")
    trace = run_dir.unfused_trace(runs[1].backend)
    rerun = record(script, script_args, Recording.of(config, runs[1].backend, materialize=True), trace, echo)
    trace = rerun.trace  # where it went: one rank's trace of a distributed run
    narrowing: dict[str, Any] = {"method": METHOD, "trace": str(trace), "fused_candidates": candidates}
    failure = rerun.failure()
    if failure:
        narrowing.update(result="failed", detail=failure)
        return _annotate(outcome, narrowing, f"narrowing failed ({failure}); candidates are the fused kernel's ops")
    noise_trace = (outcome.calibration or {}).get("noise_trace")  # judged as the fused run was
    try:
        unfused = decide(diff_traces(runs[0].trace, trace, config, noise_trace=noise_trace),
                         [str(runs[0].trace), str(trace)], config).first_divergence
    except TraceFormatError as e:
        narrowing.update(result="failed", detail=str(e))
        return _annotate(outcome, narrowing, f"narrowing failed ({e})")
    found = unfused.to_json() if unfused else None
    records = records_at(runs[0].trace, {c["index"] for c in [*candidates, *((found or {}).get("candidates") or [])]})

    def moves(index: int) -> bool:
        return index in records and preserves_values(records[index])

    judgement = judge_unfused(found, candidates, moves, partial(feeds_a_candidate, records, candidates, moves))
    narrowing["result"] = judgement.result
    if judgement.result == "vanished":
        float64_trace = Path(noise_trace) if noise_trace else run_dir.float64_trace(runs[0].backend)
        effect = _fusion_effect(first.to_json(), runs[0], float64_trace, bool(noise_trace), script, script_args,
                                config, echo, record)
        narrowing.update(fusion_effect=effect.effect, fusion_evidence=dict(effect.as_dict(), float64_trace=str(float64_trace)))
        return _annotate(outcome, narrowing, _vanished_note(effect))
    assert unfused is not None and found is not None
    if judgement.result in ("pinned", "earlier"):
        assert judgement.pinned is not None
        pinned = Site.from_json(judgement.pinned)
        narrowing.update(pinned_by=judgement.pinned_by, unfused_candidates=found.get("candidates"))
        note = unfused.note
        if judgement.result == "earlier":
            note = (f"with one kernel per op the difference shows earlier, at {pinned.op}: the fused "
                    f"run carried it within the tolerance until {first.site.op} (#{first.site.index}); {unfused.note}")
        elif judgement.shared:
            note = (f"pinned: {pinned.op} is the only op that computes among both the fused kernel's "
                    f"candidates and those of the run with one kernel per op; {unfused.note}")
        elif pinned.index != unfused.site.index or len(unfused.candidates) > 1:
            note = (f"pinned: with one kernel per op, {pinned.op} is the only candidate that computes "
                    f"(the others only move values); {unfused.note}")
        narrowed = replace(unfused, site=pinned, path=_path(records, pinned, unfused.path),
                           candidates=(pinned,), pinned_by=judgement.pinned_by, narrowing=narrowing, note=note)
        return replace(outcome, first_divergence=narrowed)
    if judgement.result == "narrowed":
        if not judgement.shared:
            return replace(outcome, first_divergence=replace(unfused, narrowing=narrowing))
        # Only the ops both runs hold as candidates; named as the unfused run names them, else the
        # last of them (as a fused verdict names the last op of its kernel).
        kept = tuple(c for c in unfused.candidates if c.index in judgement.computing)
        named = next((c for c in kept if c.index == unfused.site.index), kept[-1])
        narrowed = replace(unfused, site=named, path=_path(records, named, unfused.path),
                           candidates=kept, narrowing=narrowing,
                           note=(f"with one kernel per op the difference shows at {unfused.site.op} "
                                 f"({unfused.site.source}); {len(kept)} computing ops are candidates of both runs"))
        return replace(outcome, first_divergence=narrowed)
    narrowing.update(unfused_first_divergence=found)
    return _annotate(outcome, narrowing, f"with one kernel per op the first divergence is {unfused.site.op} at "
                     f"{unfused.site.source} instead, outside this kernel's ops or not pinned; keeping the fused verdict")


def _path(records: dict[int, TraceRecord], site: Site, default: str | None) -> str | None:
    """The file of A's record at `site` (the op now named), else `default`."""
    record = records.get(site.index) if site.index is not None else None
    return (record or {}).get("path", default)


def _fusion_effect(first: dict[str, Any], run_a: RunResult, float64_trace: Path, recorded: bool, script: Path,
                   script_args: list[str], config: Config, echo: Callable[[str], None],
                   record: Callable[..., RunResult]) -> FusionEffect:
    """Precision or wrong result: judged against a float64 run of the reference (`recorded`: calibration's)."""
    if not recorded:
        echo("tracediff: the runs match without fusion; re-running the reference in float64 to tell precision "
             "from a wrong result")
        run = record(script, script_args, Recording.of(config, run_a.backend, float64=True), float64_trace, echo)
        if run.failure():
            return FusionEffect("unknown", None, None, f"the float64 run failed ({run.failure()})")
        float64_trace = run.trace  # one rank's trace of a distributed run
    try:
        return judge_divergence(first, run_a.trace, float64_trace)
    except TraceFormatError as e:
        return FusionEffect("unknown", None, None, f"the float64 trace cannot be read ({e})")


def _vanished_note(effect: FusionEffect) -> str:
    known = ("with one kernel per op the runs match: the fused kernel's output differs from the same ops run "
             "one by one")
    if effect.effect == PRECISION:
        return f"{known}; {effect.reason}: a precision difference of fusion, not a wrong result"
    if effect.effect == WRONG_RESULT:
        return (f"{known}; {effect.reason}: a wrong result of the fused kernel (likely a compiler bug in fusion); "
                "candidates are the fused ops")
    return f"{known}; precision or wrong result cannot be told ({effect.reason}); candidates are the fused ops"


def _annotate(outcome: Outcome, narrowing: dict[str, Any], note: str) -> Outcome:
    assert outcome.first_divergence is not None
    return replace(outcome, first_divergence=replace(outcome.first_divergence, narrowing=narrowing),
                   notes=(*outcome.notes, note))
