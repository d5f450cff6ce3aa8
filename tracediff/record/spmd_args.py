"""What a distributed run's records add so ranks can be compared with each other (diff/replicas.py).

Two ranks running one program hold the same values where the program keeps them
replicated; an op given the same tensors on both must then give the same result,
unless its other arguments differ (`x[rank]`, `x * world_size + rank`). The
record keeps a digest of those arguments (`sa`), and for a collective the size
of its process group (`gs`): a collective over a subgroup replicates a value
within the subgroup only.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch


def scalar_digest(args: tuple, kwargs: dict) -> str:
    """A short digest of an op's arguments other than tensors, equal on two ranks that passed the
    same ones. Devices count by type only (rank 1 works on cuda:1 what rank 0 does on cuda:0), and an
    object (a process group) by its type: its text holds an address."""
    text = "|".join([*map(_scalar_text, args), *(f"{k}={_scalar_text(v)}" for k, v in sorted(kwargs.items()))])
    return f"{zlib.crc32(text.encode()):08x}"


def _scalar_text(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "T"
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.layout, torch.memory_format)):
        return repr(value)
    if isinstance(value, torch.device):
        return value.type
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_scalar_text, value)) + "]"
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return str(value)
    return type(value).__name__


def group_size(argument_names: list[str], args: tuple, kwargs: dict) -> int | None:
    """The number of ranks a collective spans, from its process group (c10d's ops) or the name of one
    (the functional collectives' `group_name`); None if it cannot be told."""
    named = {**dict(zip(argument_names, args)), **kwargs}
    for name, value in named.items():
        size = _size_of(value, by_name=name in ("group_name", "process_group"))
        if size is not None:
            return size
    return None


def _size_of(value: Any, by_name: bool) -> int | None:
    import torch.distributed as dist

    try:
        if isinstance(value, dist.ProcessGroup):
            return int(value.size())
        if by_name and isinstance(value, torch.ScriptObject):  # how c10d's ops are given their group
            return int(dist.ProcessGroup.unbox(value).size())
        if by_name and isinstance(value, str):
            from torch.distributed.distributed_c10d import _resolve_process_group

            return int(_resolve_process_group(value).size())  # type: ignore[arg-type]  # a GroupName is a str
    except (RuntimeError, ValueError, KeyError, AttributeError):
        return None
    return None


def default_group() -> dict[str, Any] | None:
    """The default process group's backend ("gloo", "nccl") and size; None before one exists."""
    import torch.distributed as dist

    try:
        if dist.is_available() and dist.is_initialized():
            return {"backend": str(dist.get_backend()), "size": dist.get_world_size()}
    except (RuntimeError, ValueError):
        return None
    return None


def placement_kind(t: torch.Tensor) -> str:
    """A DTensor's placements in one letter: "R" where every mesh dimension replicates it (each rank holds
    the whole, alike), "S" where one shards it or holds partial sums (each rank holds its own part)."""
    try:
        return "R" if all(p.is_replicate() for p in t.placements) else "S"  # type: ignore[attr-defined]
    except AttributeError:
        return "S"
