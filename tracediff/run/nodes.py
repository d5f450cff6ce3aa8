"""`tracediff run --nnodes N` on one node of a job: what its report says about the ranks it did not run.

Every node runs the same command. Each records A, then B, on its own ranks (each launch a rendezvous of
all the nodes), and compares the ranks it ran under both, rank by rank, as on one host; narrowing, which
would re-launch the job, is left out. The ranks of the other nodes are compared once every node's traces
are in one directory (a shared --out-dir, or copied together): `tracediff diff DIR/a-X.jsonl DIR/b-Y.jsonl`.
The report names global ranks throughout; the notes here say which ranks this node ran and how to
compare the whole job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tracediff.launch.nodes import Nodes
from tracediff.outcome import Outcome, RunResult
from tracediff.outputs import RunDir


def _rank_list(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks)) or "none"


def whole_job_command(runs: Sequence[RunResult], run_dir: RunDir) -> str:
    """The `tracediff diff` that compares every rank of the job, once the nodes' traces are together."""
    return "tracediff diff " + " ".join(str(run_dir.path / run.trace.name) for run in runs)


def on_node(outcome: Outcome, runs: Sequence[RunResult], nodes: Nodes | None, run_dir: RunDir) -> Outcome:
    """`outcome` of this node's ranks, with a note on the job: which ranks ran here, and how to compare all."""
    if nodes is None:
        return outcome
    world = next((run.world_size for run in runs if run.world_size), None)
    ran = "; ".join(f"{run.backend}: {_rank_list(run.ranks)}" for run in runs)
    here = f"ranks {_rank_list(runs[0].ranks)}" if len({run.ranks for run in runs}) == 1 else f"ranks ({ran})"
    note = (f"node {nodes.node_rank} of a job on {nodes.nnodes} nodes ran {here} of {world or 'an unknown number'}"
            f" and compared those alone; to compare every rank, gather all nodes' traces into one directory (or "
            f"share --out-dir) and run: {whole_job_command(runs, run_dir)}")
    return replace(outcome, notes=(note, *outcome.notes))


def no_rank_in_common(runs: Sequence[RunResult], run_dir: RunDir) -> str:
    """Why a node has nothing to compare: the rendezvous gave it other ranks for A than for B."""
    return (f"this node ran rank(s) {_rank_list(runs[0].ranks)} under {runs[0].backend} and "
            f"{_rank_list(runs[1].ranks)} under {runs[1].backend} (the c10d rendezvous numbered the nodes "
            f"differently): nothing to compare rank by rank here; gather all nodes' traces into one directory "
            f"and run {whole_job_command(runs, run_dir)}, or use --rdzv-backend static")
