"""`tracediff run --nproc-per-node N`: each backend recorded on N ranks by torch's launcher, rank R of
one run diffed against rank R of the other, and each run's replicas checked across its ranks. With
--nnodes, the same on this node's ranks of a job on several nodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tracediff.config import Config
from tracediff.diff.rank_verdict import combine, replica_outcome
from tracediff.diff.replicas import ReplicaCheck, check_replicas
from tracediff.errors import UserError
from tracediff.launch.launcher import record_in_subprocess
from tracediff.launch.nodes import Nodes
from tracediff.launch.recording import Recording
from tracediff.outcome import Outcome, RunResult, RunSummary, Verdict
from tracediff.outputs import RunDir
from tracediff.run.nodes import no_rank_in_common, on_node


def rank_run(run: RunResult, rank: int) -> RunResult:
    """Global rank `rank` of a distributed run, as a run of its own: its trace; a failure stays the run's,
    naming the rank that failed first."""
    return replace(run, trace=run.rank_trace(rank), rank_traces=(), ranks=())


class RankRecorder:
    """A `record` for run/narrow.py that records every rank once and answers for one rank: narrowing rank
    R's comparison re-runs the whole distributed job, and rank S's reuses that re-run."""

    def __init__(self, nproc: int) -> None:
        self.nproc = nproc
        self._done: dict[tuple[Recording, Path], RunResult] = {}

    def for_rank(self, rank: int) -> Callable[..., RunResult]:
        def record(script: Path, script_args: list[str], recording: Recording, trace: Path,
                   echo: Callable[[str], None]) -> RunResult:
            key = (recording, trace)
            if key not in self._done:
                self._done[key] = record_in_subprocess(script, script_args, replace(recording, nproc=self.nproc),
                                                       trace, echo)
            return rank_run(self._done[key], rank)
        return record


def _on_rank(echo: Callable[[str], None], rank: int) -> Callable[[str], None]:
    """`echo` with the rank after the `tracediff:` of each progress line."""
    return lambda line: echo(line.replace("tracediff: ", f"tracediff: rank {rank}: ", 1))


def check_run_replicas(run: RunResult, config: Config, echo: Callable[[str], None]) -> ReplicaCheck | None:
    """The replica check of a run whose every rank left a trace; None for a failed run, or one rank alone
    (a node of a multi-node job that ran one rank)."""
    if not run.ok or len(run.rank_traces) < 2 or not all(p.is_file() for p in run.rank_traces):
        return None
    echo(f"tracediff: comparing the replicas of {len(run.rank_traces)} ranks under backend {run.backend}")
    check = check_replicas(list(run.rank_traces), config, run.backend, ranks=run.ranks)
    if check.first is not None:
        echo(f"tracediff: backend {run.backend}: ranks {check.first.base} and {check.first.rank} part at "
             f"{check.first.site.op} ({check.first.site.source}) on rank {check.first.on_rank}")
    return check


def _summary(run: RunResult) -> RunSummary:
    return RunSummary(run.backend, run.failure(), returncode=run.returncode, timed_out=run.timed_out,
                      elapsed_s=round(run.elapsed_s, 2), log=str(run.log), output_tail=tuple(run.output_tail))


def run_ranks(path: Path, script_args: list[str], backends: list[str], config: Config, run_dir: RunDir, nproc: int,
              echo: Callable[[str], None], narrow_fused: bool = True, nodes: Nodes | None = None) -> Outcome:
    """Two backends on `nproc` ranks each, compared rank by rank; one backend: its replicas checked only.
    With `nodes`, this node's part of a job on several: each backend is a launch (a rendezvous) of its own,
    and the ranks compared are those this node ran (run/nodes.py)."""
    from tracediff.run.narrow import narrow, needs_narrowing
    from tracediff.run.recording import compare_runs, record_run

    runs = [record_run(path, script_args, backend, run_dir.trace(slot, backend), config, echo, nproc=nproc,
                       nodes=nodes.for_launch(slot) if nodes is not None else None)
            for slot, backend in zip("ab", backends)]
    checks = [c for c in (check_run_replicas(run, config, echo) for run in runs) if c is not None]
    ranks = [rank for rank in runs[0].ranks if all(rank in run.ranks for run in runs)]
    if len(runs) == 2 and not ranks and not any(run.failure() for run in runs):
        raise UserError(no_rank_in_common(runs, run_dir))
    if len(runs) == 1 or not ranks:
        traces = [str(p) for p in runs[0].rank_traces]
        base = Outcome(Verdict.FAILED if any(run.failure() for run in runs) else Verdict.MATCH, tuple(traces), None,
                       tuple(_summary(run) for run in runs), (), None)
        return on_node(replica_outcome(checks[0], traces, base) if checks and len(runs) == 1 else base, runs, nodes,
                       run_dir)
    recorder = RankRecorder(nproc)
    per_rank: list[Outcome] = []
    for rank in ranks:
        pair = [rank_run(run, rank) for run in runs]
        said = _on_rank(echo, rank)
        outcome = compare_runs(pair[0], pair[1], config, said)
        # Narrowing re-launches the job: under several nodes, every node would have to join that re-run.
        if (narrow_fused and nodes is None and needs_narrowing(outcome, pair[1].trace)
                and backends[0] != backends[1]):
            outcome = narrow(outcome, pair, path, script_args, config, run_dir, said, record=recorder.for_rank(rank))
        per_rank.append(outcome)
    return on_node(combine(per_rank, checks, ranks), runs, nodes, run_dir)
