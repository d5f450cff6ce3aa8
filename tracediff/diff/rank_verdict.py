"""One verdict for a distributed comparison: rank R of run A against rank R of run B, for every rank,
and the replica check of each run (diff/replicas.py).

The ranks run side by side, and a difference made on one reaches the others through collectives:
the report names the rank where it was made. Ranks are ordered by the collectives they had completed
when they diverged (a logical clock every rank shares); at the same count, a difference made on the
rank itself comes before one a collective brought in, and then the lower rank comes first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tracediff.diff.replicas import Drift, ReplicaCheck
from tracediff.op_names import is_collective
from tracediff.outcome import Cause, Divergence, Outcome, RankVerdict, Verdict
from tracediff.trace.reader import Trace
from tracediff.trace.schema import KERNEL, OP


def collectives_before(trace: str | Path, index: int) -> int:
    """How many collectives trace `trace` ran before its record `index`."""
    count = 0
    for record in Trace(trace):
        if record.get("i", -1) >= index:
            break
        if record["t"] == OP and is_collective(record.get("op")):
            count += 1
    return count


def entered_by(divergence: Divergence, trace_a: str | Path) -> str:
    """"collective" where the difference is a collective's result: the op named is a collective, or one
    of the values it reads was written by one; "local" where the rank made it."""
    named = [divergence.site.op, *(c.op for c in divergence.candidates)]
    if divergence.observed is not None:
        named.append(divergence.observed.op)
    if any(is_collective(op) for op in named):
        return "collective"
    index = divergence.site.index
    return "collective" if index is not None and any(map(is_collective, _writers_of_inputs(trace_a, index))) else "local"


def _writers_of_inputs(trace_a: str | Path, index: int) -> list[str]:
    """The ops that wrote the values record `index` of `trace_a` reads. A value no record made, first seen
    right after a collective, is that collective's: a backend may compute a result outside the
    dispatcher (gloo's reduce-scatter all-reduces a copy, then splits it with dispatched ops)."""
    writers: dict[int, str] = {}
    seen: set[int] = set()
    previous = ""
    for record in Trace(trace_a):
        if record["t"] not in (OP, KERNEL):
            continue
        inputs = record.get("in") or ()
        if record.get("i") == index:
            return [writers[t["id"]] for t in inputs if t["id"] in writers] + [
                previous for t in inputs if t["id"] not in seen and is_collective(previous)]
        for t in inputs:
            seen.add(t["id"])
        for out in record.get("out") or ():
            seen.add(out["id"])
            writers[out["id"]] = record.get("op") or record.get("name") or ""
            if out.get("b") is not None:
                writers[out["b"]] = writers[out["id"]]
        previous = record.get("op") or record.get("name") or ""
    return []


def combine(per_rank: Sequence[Outcome], checks: Sequence[ReplicaCheck]) -> Outcome:
    """The distributed comparison as one Outcome: the rank where the difference was made gives the
    top-level verdict and `first_divergence`; `ranks` holds every rank's, `replicas` each run's check."""
    verdicts: list[RankVerdict] = []
    order: list[tuple[int, int, int]] = []
    marked: list[Outcome] = []
    for rank, outcome in enumerate(per_rank):
        first = outcome.first_divergence
        if first is not None:
            first = replace(first, rank=rank, entered=entered_by(first, outcome.traces[0]))
            index = first.site.index if first.site.index is not None else 0
            order.append((collectives_before(outcome.traces[0], index), first.entered == "collective", rank))
        outcome = replace(outcome, first_divergence=first)
        marked.append(outcome)
        verdicts.append(RankVerdict(rank, outcome.verdict, outcome.traces, first, outcome.notes))
    failed = [o for o in marked if o.verdict is Verdict.FAILED]
    if failed:
        top = failed[0]
    elif order:
        top = marked[min(order)[2]]
    else:
        top = marked[0]
    drift = next((c.first for c in checks if c.first is not None), None)
    notes = list(top.notes)
    if top.verdict is Verdict.DIVERGED and top.first_divergence is not None:
        made_on = top.first_divergence.rank
        diverged = [v.rank for v in verdicts if v.verdict is Verdict.DIVERGED]
        notes.insert(0, f"ranks that diverge: {', '.join(map(str, diverged))} of {len(verdicts)}; "
                        f"the difference was made on rank {made_on} "
                        f"({'brought in by a collective' if top.first_divergence.entered == 'collective' else 'locally'})")
    if top.verdict is Verdict.MATCH and drift is not None:
        check = next(c for c in checks if c.first is drift)
        top = replace(top, verdict=Verdict.DIVERGED, first_divergence=drift_divergence(drift))
        notes.insert(0, f"the runs agree rank by rank, but within run {check.backend or 'as written'} the replicas "
                        f"of ranks 0 and {drift.rank} part: {drift.why}")
    return replace(top, ranks=tuple(verdicts), replicas=tuple(c.to_json() for c in checks), notes=tuple(notes))


def drift_divergence(drift: Drift) -> Divergence:
    """A replica drift as the report's `first_divergence` (a run whose ranks drift apart, nothing else)."""
    pinned = "value" if drift.how == "computed" else "position"
    return Divergence(Cause.OUTPUT, drift.site, drift.rel_diff, (drift.site,), pinned, drift.path, True, False,
                      f"replicas part: {drift.why}; {drift.comparison}", None, None, None,
                      rank=drift.on_rank, entered="local", rule="replicas_part")


def replica_outcome(check: ReplicaCheck, traces: Sequence[str], base: Outcome) -> Outcome:
    """One run on several ranks checked for drift alone (`tracediff run --backends inductor --nproc-per-node 2`)."""
    drift = check.first
    notes = [f"{check.world_size} ranks, {check.replicated_values} replicated values compared across "
                        f"ranks: " + ("in sync" if drift is None else f"ranks 0 and {drift.rank} part")]
    verdict = base.verdict if base.verdict is Verdict.FAILED else Verdict.MATCH if drift is None else Verdict.DIVERGED
    return replace(base, verdict=verdict, traces=tuple(traces),
                   first_divergence=drift_divergence(drift) if drift is not None and verdict is Verdict.DIVERGED else None,
                   notes=(*notes, *base.notes), replicas=(check.to_json(),))


