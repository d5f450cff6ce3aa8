"""The core of `tracediff run` and `tracediff diff`, one function each: the CLI parses and calls them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tracediff.config import Config
from tracediff.diff.decide import decide
from tracediff.diff.engine import diff_traces
from tracediff.diff.rank_verdict import combine
from tracediff.diff.replicas import check_replicas
from tracediff.diff.sample import AlignmentSample
from tracediff.errors import UserError, interrupt_keeps
from tracediff.launch.launcher import check_script
from tracediff.launch.nodes import Nodes
from tracediff.outcome import Outcome
from tracediff.outputs import RunDir, rank_path, rank_set
from tracediff.run.pipeline import parse_backends, refuse_inside_a_rank, run_and_diff, write_report
from tracediff.run.ranks import run_ranks
from tracediff.run.repeat import run_repeated
from tracediff.trace.reader import Trace


def run_script(script: str, script_args: list[str], backends: str, config: Config, out_dir: str | None,
               echo: Callable[[str], None], *, repeat: int | None = None, calibrate: bool = False,
               narrow_fused: bool = True, sample: AlignmentSample | None = None, nproc: int = 1,
               nodes: Nodes | None = None) -> Outcome:
    """Two backends once (`run_and_diff`), or each backend `repeat` times (`run_repeated`: one backend
    given, or --repeat above 1); on `nproc` ranks, each backend once, compared rank by rank (one backend:
    its ranks' replicas checked), on this node's ranks of a job on several `nodes` where given. `sample`
    collects the alignment for --html (a single comparison only)."""
    names = parse_backends(backends, script, allow_one=True)
    distributed = "--nnodes" if nodes is not None else "--nproc-per-node" if nproc > 1 else None
    if config.light:
        check_light(names, config, repeat, calibrate, distributed)
    if distributed is not None:
        if repeat is not None or calibrate:
            raise UserError(f"{distributed} runs each backend once: it does not combine with --repeat or --calibrate")
        return run_distributed(script, script_args, names, config, out_dir, echo, nproc, narrow_fused, nodes)
    if rank_path(Path("t.jsonl")) != Path("t.jsonl"):
        # Each rank would record both backends, the second launch meeting the first's leftovers at the
        # same MASTER_PORT, and every rank would write the same run directory.
        raise UserError("tracediff run does not run inside a rank an outside launcher started (torchrun, srun: "
                        "RANK and WORLD_SIZE are set): record each backend with `tracediff record` in every rank, "
                        "then compare with `tracediff diff`; or let tracediff launch with --nproc-per-node/--nnodes")
    if repeat is not None and repeat < 1:
        raise UserError(f"--repeat takes a number of runs of at least 1, got {repeat}")
    if len(names) == 1 and (repeat or 2) < 2:
        raise UserError("one backend needs --repeat 2 or more: there is nothing to compare a single run with")
    if len(names) == 1 or (repeat or 1) > 1:
        if calibrate:
            raise UserError("--calibrate compares two backends once; it does not combine with --repeat or one backend")
        return run_repeated(script, script_args, names, repeat or 2, config, out_dir, echo, narrow_fused=narrow_fused)
    return run_and_diff(script, script_args, names, config, out_dir, echo, narrow_fused=narrow_fused,
                        calibrate=calibrate, sample=sample)


def check_light(names: list[str], config: Config, repeat: int | None, calibrate: bool,
                distributed: str | None = None) -> None:
    """--light compares two backends once, in one process, with the same-input judge deciding."""
    if len(names) != 2 or (repeat or 1) > 1:
        raise UserError("--light compares two backends once: give two (e.g. --backends eager,inductor), no --repeat")
    if calibrate or distributed:
        raise UserError("--light does not combine with " + ("--calibrate" if calibrate else str(distributed)))
    if not config.same_inputs:
        raise UserError("--light judges the compiled calls on their own inputs: it does not combine with "
                        "--no-same-inputs (same_inputs: false)")


def run_distributed(script: str, script_args: list[str], backends: list[str], config: Config, out_dir: str | None,
                    echo: Callable[[str], None], nproc: int, narrow_fused: bool = True,
                    nodes: Nodes | None = None) -> Outcome:
    """`tracediff run --nproc-per-node N` (or --nnodes): the report written into the run directory, as
    `report.node<N>.json` on node N of several (the nodes may share the directory)."""
    refuse_inside_a_rank("--nnodes" if nodes is not None else "--nproc-per-node")
    path = check_script(script)
    run_dir = RunDir.create(out_dir, config.compress)
    with interrupt_keeps(f"the traces recorded so far are in {run_dir}"):
        outcome = run_ranks(path, script_args, backends, config, run_dir, nproc, echo, narrow_fused, nodes)
    outcome = replace(outcome, run_dir=str(run_dir), script=str(path))
    write_report(outcome, run_dir, node=nodes.node_rank if nodes is not None else None)
    return outcome


def diff_recordings(trace_a: str, trace_b: str, config: Config, noise_trace: str | None = None,
                    sample: AlignmentSample | None = None, progress: Callable[[str], None] | None = None) -> Outcome:
    """`tracediff diff`: two recordings compared, A the reference; `noise_trace` a float64 re-run of A;
    `progress` told how a long diff goes."""
    if noise_trace is not None and not Path(noise_trace).is_file():
        raise UserError(f"{noise_trace}: no such file")
    sets = rank_set(Path(trace_a)), rank_set(Path(trace_b))
    if sets[0] is not None or sets[1] is not None:
        return diff_rank_sets(trace_a, trace_b, sets, config, noise_trace)
    result = diff_traces(trace_a, trace_b, config, sample=sample, noise_trace=noise_trace, progress=progress)
    return decide(result, [trace_a, trace_b], config)


def diff_rank_sets(trace_a: str, trace_b: str, sets: tuple[list[Path] | None, list[Path] | None], config: Config,
                   noise_trace: str | None) -> Outcome:
    """Two distributed recordings compared rank by rank, and each one's replicas across its ranks."""
    set_a, set_b = sets
    if set_a is None or set_b is None:
        single, other = (trace_a, trace_b) if set_a is None else (trace_b, trace_a)
        raise UserError(f"{other} holds one trace per rank, {single} a single trace: compare a rank with a rank "
                        f"(e.g. {(set_a or set_b or [Path(other)])[0]})")
    for name, ranks in ((trace_a, set_a), (trace_b, set_b)):
        check_whole_job(name, ranks)
    if len(set_a) != len(set_b):
        raise UserError(f"{trace_a} has {len(set_a)} ranks, {trace_b} {len(set_b)}: they pair rank by rank")
    if noise_trace is not None:
        raise UserError("--noise takes one float64 trace: it does not apply to per-rank traces")
    per_rank = [decide(diff_traces(a, b, config), [str(a), str(b)], config) for a, b in zip(set_a, set_b)]
    checks = [check_replicas(list(ranks), config, Trace(ranks[0]).header.get("backend")) for ranks in (set_a, set_b)]
    return combine(per_rank, checks)


def check_whole_job(name: str, ranks: list[Path]) -> None:
    """A set of per-rank traces (rank 0 first) holds every rank of its job, as its headers' world size says:
    a multi-node job's traces are written on each node, and a node's alone are not the job."""
    world_size = Trace(ranks[0]).header.get("world_size")
    if isinstance(world_size, int) and world_size > len(ranks):
        missing = ", ".join(map(str, range(len(ranks), world_size)))
        raise UserError(f"{name}: the traces of rank(s) {missing} of {world_size} are missing (a job on several "
                        f"nodes: gather every node's traces into one directory)")


def is_single_comparison(backends: str, repeat: int | None) -> bool:
    """Does `run_script` make one comparison (whose alignment an HTML report can draw)?"""
    return len(backends.split(",")) == 2 and (repeat or 1) <= 1
