"""Render a report dict as text for a terminal. Pure: dict in, str out."""

from __future__ import annotations

from typing import Any

from tracediff.diff.same_inputs import left_out_by_policy

_VERDICT_LINE = {
    "match": "MATCH: no divergence",
    "diverged": "DIVERGED",
    "failed": "FAILED: a run did not complete",
}


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _fingerprint(fp: dict[str, Any] | None) -> str:
    if not fp:
        return "(no data)"
    parts = [f"{k}={_fmt(fp[k])}" for k in ("sum", "l1", "l2", "max") if k in fp]
    parts += [f"{k}={fp[k]}" for k in ("nan", "inf") if fp.get(k)]
    return " ".join(parts)


def render_text(report: dict[str, Any]) -> str:
    """The report for a terminal: what was compared, the verdict and where it was found, then each section the
    report holds (same-input checks, ranks, calibration, repeats, bisection, structure, NaN origins, notes)."""
    same_inputs = report.get("same_inputs")
    if same_inputs and not same_inputs.get("calls") and not same_inputs.get("backward_calls"):
        same_inputs = None  # no call could be judged: the traces decided, as without the judge
    lines = _render_heading(report)
    lines.append("")
    lines.append(_VERDICT_LINE[report["verdict"]])
    lines += _render_finding(report, same_inputs)

    if same_inputs:
        lines += _render_same_inputs(same_inputs)
    if report.get("ranks"):
        lines += _render_ranks(report["ranks"])
    if report.get("replicas"):
        lines += _render_replicas(report["replicas"])
    calibration = report.get("calibration")
    if calibration:
        lines.append(f"  calibrated: differences judged against max(tolerance, {calibration['factor']:g} x noise), "
                     f"noise measured on {calibration['tensors']} tensors by a float64 re-run of A "
                     f"({calibration['paired_records']} of {calibration['records']} records paired); "
                     f"{calibration['passed_by_noise']} beyond the tolerance but within noise (at most "
                     f"{calibration.get('max_above_noise_passed', 0):g}x their noise)")
    determinism = report.get("determinism")
    if determinism and determinism.get("advice"):
        lines.append(f"  nondeterminism ({determinism['cause'].replace('_', ' ')}):")
        lines += [f"    - {line}" for line in determinism["advice"]]
    if report.get("repeat"):
        lines += _render_repeat(report)
    if "bisect" in report:
        lines += _render_bisect(report)
    structure = report.get("structure") or {}
    if structure.get("count"):
        lines.append("")
        lines.append(f"structure: {structure['count']} record(s) on one side only"
                     + ("" if structure.get("strict") else " (not a failure; --strict-structure makes it one)"))
        lines += [f"  {e}" for e in structure.get("examples", [])]
    nan = report.get("nan_origin") or {}
    for label in ("a", "b"):
        place = nan.get(label)
        if place:
            head, *rest = describe_nan_origin(place)
            lines.append(f"first NaN/Inf in {label.upper()}: {head}")
            lines += [f"  {line}" for line in rest]
    if report.get("header_differences"):
        lines.append("")
        lines.append("header differences (A -> B):")
        lines += [f"  {d}" for d in report["header_differences"]]
    for note in report.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


def _render_heading(report: dict[str, Any]) -> list[str]:
    """What was compared: the backends and their traces (or one distributed run's ranks), a run that failed, and
    whether this is a determinism check."""
    lines: list[str] = []
    backends = [r.get("backend") for r in report.get("runs", [])]
    title = " vs ".join(str(b) for b in backends if b) or "A vs B"
    one_run = report.get("replicas") is not None and report.get("ranks") is None
    if one_run:  # one distributed run, its ranks compared with each other
        lines.append(f"tracediff: the replicas of {len(report.get('traces', []))} ranks under {title}")
        ranks = (report["replicas"][0].get("ranks") if report["replicas"] else None) or range(len(report["traces"]))
        lines += [f"  rank {r}: {path}" for r, path in zip(ranks, report.get("traces", []))]
    else:
        lines.append(f"tracediff: {title}" + (f", rank by rank ({len(report['ranks'])} ranks)"
                                              if report.get("ranks") else ""))
        for label, path in zip("AB", report.get("traces", [])):
            lines.append(f"  {label}: {path}")
    for label, run in zip("AB", report.get("runs", [])):
        lines += _render_failed_run(label, run)
    determinism = report.get("determinism")
    if determinism:
        lines.append(f"  determinism check: two runs of the same configuration (backend {determinism['backend']})")
    return lines


def _render_finding(report: dict[str, Any], same_inputs: dict[str, Any] | None) -> list[str]:
    """Under the verdict line: the first divergence, or what agreed (`same_inputs`: the same-input checks, when
    some call was judged)."""
    first = report.get("first_divergence")
    if first:
        # Under a same-input verdict the traces' later differences are the runs', not this call's doing.
        inherited = 0 if same_inputs else report.get("inherited", 0)
        return _render_divergence(first, inherited, report.get("inherited_complete", True))
    if report["verdict"] == "failed" and "compared" in report:
        return [f"  no divergence in the {report['compared']} records compared before the failure"]
    if report["verdict"] == "match" and same_inputs:
        drift = report.get("drift")
        where = f" at {drift['source']}" if drift and drift.get("source") else ""
        sampled = _left_out_by_policy(same_inputs)
        return [f"  every {'judged ' if sampled else ''}compiled call is as close to float64 as eager on its own "
                "inputs"
                + (f"; the runs drift apart from {drift['op']}{where}: rounding, not the compiler" if drift else "")]
    if report["verdict"] == "match":
        lines = [f"  {report.get('compared', 0)} paired records agree within tolerance "
                 f"(float32 {_tol(report, 'float32')})"]
        unpaired = report.get("unpaired") or {}
        if unpaired.get("a"):
            lines.append(f"  {unpaired['a']} records of A have no counterpart in B (fused or decomposed); "
                         "the values they feed into agree")
        return lines
    return []


def _left_out_by_policy(same_inputs: dict[str, Any]) -> bool:
    """Whether calls were left unjudged by choice (the light mode, a window), not only by failing references."""
    return left_out_by_policy(same_inputs.get("calls_made"), same_inputs.get("calls", 0),
                              same_inputs.get("policy")) > 0


def _render_same_inputs(same_inputs: dict[str, Any]) -> list[str]:
    """What judging each compiled call on its own inputs came to; the first wrong call's wrong outputs."""
    backward = f", {same_inputs['backward_calls']} compiled backward(s)" if same_inputs.get("backward_calls") else ""
    made = same_inputs.get("calls_made")
    of_made = f" (of {made} made; {same_inputs.get('policy')})" if _left_out_by_policy(same_inputs) else ""
    lines = ["", f"same inputs: {same_inputs['calls']} call(s){of_made} of {same_inputs['graphs']} compiled graph(s)"
                 f"{backward} re-run uncompiled and in float64; {same_inputs['wrong_calls']} wrong"]
    wrong = same_inputs.get("first_wrong")
    if wrong:
        region = wrong.get("region_call")
        within = f" (in {region['name']} call {region['call']})" if region else ""
        lines.append(f"  first wrong: call {wrong['call']} of {wrong['graph']}{within}, its {wrong['phase']}")
        for output in wrong["outputs"][:8]:
            lines.append(f"    {output['name']} {output['dtype']}{output['shape']}: {output['why']}")
        if len(wrong["outputs"]) > 8:
            lines.append(f"    ... {len(wrong['outputs']) - 8} more")
    return lines


def _render_ranks(ranks: list[dict[str, Any]]) -> list[str]:
    lines = ["", "ranks (rank R of A against rank R of B):"]
    for entry in ranks:
        first = entry.get("first_divergence")
        if first is None:
            lines.append(f"  rank {entry['rank']}: {entry['verdict']}")
            continue
        how = "brought in by a collective" if first.get("entered") == "collective" else "made on this rank"
        lines.append(f"  rank {entry['rank']}: {entry['verdict']} at {first['op']} ({first['source'] or 'no line known'}), {how}")
    return lines


def _render_replicas(checks: list[dict[str, Any]]) -> list[str]:
    base = (checks[0].get("ranks") or [0])[0] if checks else 0  # a node's ranks of a job: its lowest
    lines = ["", f"replicas (values every rank must hold alike, compared with rank {base}'s):"]
    for check in checks:
        name = check.get("backend") or "as written"
        if check["in_sync"]:
            lines.append(f"  {name}: in sync ({check['replicated_values']} replicated values compared)")
        for drift in check["drifts"]:
            lines.append(f"  {name}: ranks {drift['ranks'][0]} and {drift['ranks'][1]} part at {drift['op']} ({drift['source']}) "
                         f"on rank {drift['on_rank']}: {drift['why']}; {drift['comparison']}")
    return lines


def _render_failed_run(label: str, run: dict[str, Any]) -> list[str]:
    """`run B failed: the script raised ValueError: ...`, then the last lines the script printed."""
    if not run.get("failure"):
        return []
    lines = [f"  run {label} failed: {run['failure']}"]
    error = run.get("error") or {}
    named = str(error.get("type")) in run["failure"] or error.get("type") == "SystemExit"
    if error.get("type") and not named:  # e.g. a trace given to `diff`: the failure line may not name it
        lines.append(f"    {error['type']}: {error.get('message') or ''}".rstrip(": "))
    tail = run.get("output_tail") or []
    if tail:
        lines.append("    its last output:")
        lines += [f"    | {line}" for line in tail]
    return lines


def describe_nan_origin(origin: dict[str, Any]) -> list[str]:
    """`aten::log at model.py:19 [Net.block] (#6): output '0' f32[4, 6] has 5 NaN of 24`, then a kernel's fused ops."""
    kind = "kernel " if origin.get("fuses") else ""
    where = f"{kind}{origin['op']} at {origin.get('source')}" + (f" [{origin['module']}]" if origin.get("module") else "")
    counts = []
    for t in origin.get("outputs") or []:
        bad = ", ".join(f"{t[k]} {k.replace('nan', 'NaN').replace('inf', 'Inf')}" for k in ("nan", "inf") if t.get(k))
        counts.append(f"output {t['arg']!r} {t['dtype']}{t['shape']} has {bad} of {t.get('n')}")
    lines = [f"{where} (#{origin['index']})" + (f": {'; '.join(counts)}" if counts else "")]
    if origin.get("code") and not origin.get("fuses"):
        lines.append(f"  {origin['code']}")
    fuses = origin.get("fuses") or []
    if fuses:
        lines.append(f"a generated kernel; it fuses {len(fuses)} ops, one of which made the NaN/Inf:")
        lines += [f"  {f['op']} at {f.get('source')}" + (f" [{f['module']}]" if f.get("module") else "") for f in fuses]
    return lines


def describe_comparison(entry: dict[str, Any]) -> str:
    """`eager run 1 vs run 3: DIVERGED at aten::empty (uninitialized.py:18)`: one line per comparison."""
    a, b = entry["backends"]
    ra, rb = entry["runs"]
    pair = f"{a} run {ra} vs run {rb}" if a == b else f"{a} run {ra} vs {b} run {rb}"
    first = entry.get("first_divergence")
    if entry["verdict"] == "diverged" and first:
        return f"{pair}: DIVERGED at {first['op']} ({first.get('source')})"
    return f"{pair}: {entry['verdict'].upper()}"


def _render_repeat(report: dict[str, Any]) -> list[str]:
    lines = ["", f"repeated runs ({report.get('repeat_count')} per backend):"]
    lines += [f"  {describe_comparison(entry)}" for entry in report["repeat"]]
    return lines


def _render_bisect(report: dict[str, Any]) -> list[str]:
    found = report.get("bisect")
    lines = ["", f"bisect ({report.get('oracle_calls', 0)} recorded runs):"]
    if not found:
        lines.append("  no stage found: every bisection step matched eager")
        return lines
    lines.append(f"  backend    {found['backend']}")
    if found.get("subsystem"):
        lines.append(f"  subsystem  {found['subsystem']}")
    if found.get("debug_info"):
        lines.append(f"  applied    #{found['bisect_number']}: {found['debug_info']}")
    return lines


def _tol(report: dict[str, Any], dtype: str) -> str:
    t = (report.get("tolerances") or {}).get(dtype)
    return f"rtol={t['rtol']:g}, atol={t['atol']:g}" if t else ""


_PINNED = {
    "same_inputs": "pinned on the same inputs: this call, re-run on its very inputs uncompiled and in float64, shows "
                   "the compiled code's own difference, and a search over the graph's prefixes ends at this op",
    "value": "pinned by value: this op's own inputs agree between the runs and its outputs do not",
    "position": "pinned by position: no other op stands between values that agree and the difference",
    None: "not pinned: the difference comes from one of the candidates",
}


def _render_divergence(first: dict[str, Any], inherited: int, complete: bool = True) -> list[str]:
    rank = f" on rank {first['rank']}" if first.get("rank") is not None else ""
    lines = [f"  first divergence ({first['kind']}){rank}: {first['op']}  (#{first['index']})"]
    lines.append(f"    at     {first.get('source')}  {first.get('code') or ''}".rstrip())
    if first.get("module"):
        lines.append(f"    module {first['module']}")
    tensor = first.get("tensor")
    observed = first.get("observed")
    if observed and observed.get("index") != first["index"]:
        lines.append(f"    seen at {observed['op']} (#{observed['index']}) at {observed.get('source')}")
    if tensor:
        lines.append(f"    {tensor['side']} {tensor['arg']!r} {tensor['dtype']}{tensor['shape']}: {tensor['comparison']}")
        lines.append(f"      A: {_fingerprint(tensor['fingerprint_a'])}")
        lines.append(f"      B: {_fingerprint(tensor['fingerprint_b'])}")
    b = first.get("b")
    seen_op = (observed or first)["op"]
    if b and b.get("op") != seen_op:
        lines.append(f"    B ran {b['op']} there (#{b['index']})")
    lines.append(f"    {first.get('note')}")
    if first.get("rule"):
        lines.append(f"    rule   {first['rule']} (docs/design.md §8.2)")
    if first.get("candidates"):
        lines.append(f"    {_PINNED.get(first.get('pinned_by'), _PINNED[None])}")
    candidates = first.get("candidates") or []
    if len(candidates) > 1:
        lines.append(f"    candidates ({len(candidates)}):")
        for c in candidates[:20]:
            lines.append(f"      #{c['index']} {c['op']} at {c['source']} [{c['module']}]")
        if len(candidates) > 20:
            lines.append(f"      ... {len(candidates) - 20} more")
    narrowing = first.get("narrowing")
    if narrowing:
        fused = narrowing.get("fused_candidates") or []
        lines.append(f"    narrowing ({narrowing_outcome(narrowing)}): {narrowing.get('method')}; "
                     f"the fused kernel held {len(fused)} ops: " + ", ".join(c["op"] for c in fused))
    if inherited:
        more = "" if complete else " or more (counting stopped there)"
        lines.append(f"  {inherited}{more} later record(s) differ too (inherited from this one)")
    return lines


def narrowing_outcome(narrowing: dict[str, Any]) -> str:
    """`pinned, by position` / `vanished, fusion effect: precision`: what the unfused re-run found."""
    how = "".join(f", {label} {narrowing[key]}" for key, label in (("pinned_by", "by"), ("fusion_effect", "fusion effect:"))
                  if narrowing.get(key))
    return f"{narrowing.get('result')}{how}"
