"""`tracediff run --nproc-per-node N`: each backend recorded on N ranks by torch's launcher, rank R of
one run diffed against rank R of the other, and each run's replicas checked across its ranks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tracediff.config import Config
from tracediff.diff.rank_verdict import combine, replica_outcome
from tracediff.diff.replicas import ReplicaCheck, check_replicas
from tracediff.launch.launcher import record_in_subprocess
from tracediff.launch.recording import Recording
from tracediff.outcome import Outcome, RunResult, RunSummary, Verdict
from tracediff.outputs import RunDir


def rank_run(run: RunResult, rank: int) -> RunResult:
    """Rank `rank` of a distributed run, as a run of its own: its trace; a failure stays the run's, naming
    the rank that failed first."""
    return replace(run, trace=run.rank_traces[rank], rank_traces=())


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
    """The replica check of a run whose every rank left a trace; None for a failed run."""
    if not run.ok or not all(p.is_file() for p in run.rank_traces):
        return None
    echo(f"tracediff: comparing the replicas of {len(run.rank_traces)} ranks under backend {run.backend}")
    check = check_replicas(list(run.rank_traces), config, run.backend)
    if check.first is not None:
        echo(f"tracediff: backend {run.backend}: ranks 0 and {check.first.rank} part at {check.first.site.op} "
             f"({check.first.site.source}) on rank {check.first.on_rank}")
    return check


def run_ranks(path: Path, script_args: list[str], backends: list[str], config: Config, run_dir: RunDir, nproc: int,
              echo: Callable[[str], None], narrow_fused: bool = True) -> Outcome:
    """Two backends on `nproc` ranks each, compared rank by rank; one backend: its replicas checked only."""
    from tracediff.run.narrow import narrow, needs_narrowing
    from tracediff.run.recording import compare_runs, record_run

    runs = [record_run(path, script_args, backend, run_dir.trace(slot, backend), config, echo,
                       nproc=nproc) for slot, backend in zip("ab", backends)]
    checks = [c for c in (check_run_replicas(run, config, echo) for run in runs) if c is not None]
    if len(runs) == 1:
        run = runs[0]
        traces = [str(p) for p in run.rank_traces]
        summary = RunSummary(run.backend, run.failure(), returncode=run.returncode, timed_out=run.timed_out,
                             elapsed_s=round(run.elapsed_s, 2), log=str(run.log), output_tail=tuple(run.output_tail))
        base = Outcome(Verdict.FAILED if run.failure() else Verdict.MATCH, tuple(traces), None, (summary,), (), None)
        if not checks:
            return base
        return replica_outcome(checks[0], traces, base)
    recorder = RankRecorder(nproc)
    per_rank: list[Outcome] = []
    for rank in range(nproc):
        pair = [rank_run(run, rank) for run in runs]
        said = _on_rank(echo, rank)
        outcome = compare_runs(pair[0], pair[1], config, said)
        if narrow_fused and needs_narrowing(outcome, pair[1].trace) and backends[0] != backends[1]:
            outcome = narrow(outcome, pair, path, script_args, config, run_dir, said, record=recorder.for_rank(rank))
        per_rank.append(outcome)
    return combine(per_rank, checks)
