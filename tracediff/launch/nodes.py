"""`Nodes`: where the ranks of a multi-node recording meet, as torch's launcher (torchrun) is told.

tracediff builds no launcher: on every node, `tracediff record/run --nnodes 2 --node-rank N
--rdzv-endpoint HOST:PORT` starts `python -m torch.distributed.run` with these options instead of
`--standalone`, and torch's rendezvous makes the nodes one job. The options are checked here, before
anything runs, so a job that could never meet fails at once on one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracediff.errors import UserError

# torchrun's own default: a fixed number of nodes, rank 0's node hosting the store, each node's global
# ranks node_rank * nproc_per_node + local rank.
DEFAULT_RDZV_BACKEND = "static"
# torchrun's own default id; every node of a job must give the same one.
DEFAULT_RDZV_ID = "none"

_NNODES = re.compile(r"^(?P<low>\d+)(:(?P<high>\d+))?$")
_ENDPOINT = re.compile(r"^(?P<host>\[[^\]]+\]|[^:\s]+)(:(?P<port>\d+))?$")


@dataclass(frozen=True)
class Nodes:
    """One node's part in a job of several: torchrun's --nnodes, --node-rank and rendezvous options."""

    nnodes: str  # "2", or "1:4" (elastic, c10d)
    node_rank: int
    rdzv_endpoint: str  # HOST[:PORT], reached by every node
    rdzv_backend: str = DEFAULT_RDZV_BACKEND
    rdzv_id: str = DEFAULT_RDZV_ID

    @property
    def max_nodes(self) -> int:
        return _node_range(self.nnodes)[1]

    def torchrun_args(self) -> list[str]:
        """The options of `torch.distributed.run` for this node (in place of `--standalone`)."""
        return ["--nnodes", self.nnodes, "--node-rank", str(self.node_rank), "--rdzv-backend", self.rdzv_backend,
                "--rdzv-endpoint", self.rdzv_endpoint, "--rdzv-id", self.rdzv_id]

    def for_launch(self, name: str) -> Nodes:
        """The same nodes meeting for another launch of one command (`tracediff run` launches A, then B):
        each launch is a rendezvous of its own, so a node that starts B early cannot join A's."""
        return Nodes(self.nnodes, self.node_rank, self.rdzv_endpoint, self.rdzv_backend, f"{self.rdzv_id}-{name}")


def _node_range(nnodes: str) -> tuple[int, int]:
    found = _NNODES.match(nnodes.strip())
    if not found:
        raise UserError(f"--nnodes takes a number of nodes (2) or a range (1:4), got {nnodes!r}")
    low = int(found["low"])
    high = int(found["high"]) if found["high"] is not None else low
    if not 0 < low <= high:
        raise UserError(f"--nnodes {nnodes}: the number of nodes must be at least 1 (and MIN <= MAX)")
    return low, high


def nodes_of(nnodes: str | None, node_rank: int | None, rdzv_endpoint: str | None, rdzv_backend: str | None,
             rdzv_id: str | None) -> Nodes | None:
    """The multi-node options as one value; None when none is given (one host, `--standalone`). A
    combination torchrun could not start, or that could never meet, is a UserError of one line."""
    if nnodes is None:
        given = [name for name, value in (("--node-rank", node_rank), ("--rdzv-endpoint", rdzv_endpoint),
                                          ("--rdzv-backend", rdzv_backend), ("--rdzv-id", rdzv_id)) if value is not None]
        if given:
            raise UserError(f"{given[0]} is for a job on several nodes: give --nnodes too (e.g. --nnodes 2)")
        return None
    low, high = _node_range(nnodes)
    backend = rdzv_backend or DEFAULT_RDZV_BACKEND
    if rdzv_endpoint is None:
        raise UserError(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT, where the nodes meet "
                        "(a host every node reaches, e.g. the first node's)")
    _check_endpoint(rdzv_endpoint)
    if backend == "static" and not _ENDPOINT.match(rdzv_endpoint)["port"]:  # type: ignore[index]
        raise UserError(f"--rdzv-endpoint {rdzv_endpoint}: the static rendezvous needs a port (HOST:PORT)")
    if node_rank is None:
        raise UserError(f"--nnodes {nnodes} needs --node-rank, this node's number from 0 to {high - 1} "
                        "(e.g. $SLURM_NODEID)")
    if not 0 <= node_rank < high:
        raise UserError(f"--node-rank {node_rank} is out of range for --nnodes {nnodes} (0 to {high - 1})")
    if backend == "static" and low != high:
        raise UserError(f"--nnodes {nnodes}: a range of nodes needs --rdzv-backend c10d (static takes a fixed number)")
    if rdzv_id is not None and not rdzv_id.strip():
        raise UserError("--rdzv-id is empty: give the job a name every node shares")
    return Nodes(nnodes.strip(), node_rank, rdzv_endpoint, backend, rdzv_id or DEFAULT_RDZV_ID)


def _check_endpoint(endpoint: str) -> None:
    found = _ENDPOINT.match(endpoint)
    port = found["port"] if found else None
    if not found or (port is not None and not 0 < int(port) < 65536):
        raise UserError(f"--rdzv-endpoint takes HOST:PORT (e.g. node0.cluster:29400), got {endpoint!r}")
