"""One recorded run of the script, and the comparison of two: the steps `tracediff run` and its variants
(`--repeat`, `--nproc-per-node`, `--light`, `tracediff fix`) are made of."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tracediff.config import Config
from tracediff.diff.decide import decide, unreadable
from tracediff.diff.determinism import with_advice
from tracediff.diff.engine import diff_traces
from tracediff.diff.sample import AlignmentSample
from tracediff.errors import ExitCode, TraceFormatError, UserError
from tracediff.launch.launcher import record_in_subprocess
from tracediff.launch.nodes import Nodes
from tracediff.launch.recording import Recording
from tracediff.outcome import Outcome, RunResult
from tracediff.outputs import rank_pattern


def record_run(path: Path, script_args: list[str], backend: str, trace: Path, config: Config,
               echo: Callable[[str], None], label: str = "", float64: bool = False, nproc: int = 1,
               judge: bool = False, light: bool = False, window: str | None = None,
               nodes: Nodes | None = None) -> RunResult:
    """Record one run of the script (on `nproc` ranks: one trace per rank, `trace` with the rank in its
    name; with `nodes`, this node's part of a job on several); a backend that cannot even start is a usage
    error. `light`: compiled calls only, judged within a time budget; `window`: ops (and judged calls) only
    inside that compiled call (record/scope.py)."""
    launched = nproc > 1 or nodes is not None
    where = rank_pattern(trace) if launched else str(trace)
    on_ranks = f" on {nproc} ranks (torch.distributed.run)" if launched else ""
    if nodes is not None:
        on_ranks = (f" on {nproc} rank{'s' if nproc > 1 else ''} of node {nodes.node_rank} of {nodes.nnodes} "
                    f"(torch.distributed.run, rendezvous {nodes.rdzv_backend} at {nodes.rdzv_endpoint})")
    judged = " (each compiled call judged on its own inputs)" if judge else ""
    if light:
        judged = " (compiled calls only, judged on their own inputs within a time budget)" if judge else \
            " (compiled calls only)"
    elif window:
        judged = f" (only the ops of {window}, its compiled calls judged on their own inputs)" if judge else \
            f" (only the ops of {window})"
    echo(f"tracediff: recording {path} with backend {backend}{label}{on_ranks}{judged} -> {where}")
    recording = Recording.of(config, backend, float64=float64, nproc=nproc, judge=judge, light=light, window=window,
                             nodes=nodes)
    result = record_in_subprocess(path, script_args, recording, trace, echo)
    if result.returncode == ExitCode.USAGE:  # e.g. a custom backend that does not import: said once, as the error
        raise UserError(result.failure() or f"backend {backend}: bad usage")
    echo(f"tracediff: backend {backend}{label}: " + (result.failure() or f"done in {result.elapsed_s:.1f} s"))
    return result


def compare_runs(run_a: RunResult, run_b: RunResult, config: Config, echo: Callable[[str], None],
                 noise_trace: Path | None = None, sample: AlignmentSample | None = None) -> Outcome:
    """Diff two recorded runs into a report; two runs of one backend get determinism advice."""
    traces = [str(run_a.trace), str(run_b.trace)]
    same_backend = run_a.backend is not None and run_a.backend == run_b.backend
    try:
        echo("tracediff: aligning and comparing the two traces" + (" (calibrated)" if noise_trace else ""))
        result = diff_traces(run_a.trace, run_b.trace, config, sample=sample, noise_trace=noise_trace)
        outcome = decide(result, traces, config, [run_a, run_b], determinism_check=same_backend)
    except TraceFormatError as e:
        # A run died before it wrote a readable header: nothing to compare.
        outcome = unreadable(traces, [run_a, run_b], str(e))
    if same_backend:
        outcome = with_advice(outcome, str(run_a.backend), config.seed)
    return outcome
