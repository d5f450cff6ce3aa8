"""What the recorder reads of an op's arguments and result: their tensors, by name, and their scalars."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import _get_current_dispatch_mode, _len_torch_dispatch_stack

from tracediff.record.fingerprints.fingerprint import PLAIN_TENSORS
from tracediff.record.identity import identity
from tracediff.record.op_info import OpInfo

# (argument name, tensor, written, out buffer)
TensorArgument = tuple[str, torch.Tensor, bool, bool]

_NO_ARG = ("", False, False)


def tensor_arguments(info: OpInfo, args: tuple, kwargs: dict) -> list[TensorArgument]:
    """(argument name, tensor, written, out buffer) for every tensor argument. By hand, not with
    torch.utils._pytree: an aten op's arguments nest one list deep at most, and pytree's
    `tree_flatten_with_path` costs 20 to 25 times as much per op (44 us vs 1.8:
    BENCHMARKS.md, issue 13; the probe, bench/pytree_args.py, is in git history at bdb0ceb)."""
    found: list[TensorArgument] = []
    arguments = info.arguments
    for i, value in enumerate(args):
        if isinstance(value, torch.Tensor):
            name, written, out = arguments[i] if i < len(arguments) else (str(i), False, False)
            found.append((name, value, written, out))
        elif isinstance(value, (list, tuple)):
            name, written, out = arguments[i] if i < len(arguments) else (str(i), False, False)
            for j, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    found.append((f"{name}.{j}", item, written, out))
    for key, value in kwargs.items():
        _, written, out = info.by_name.get(key, _NO_ARG)
        if isinstance(value, torch.Tensor):
            found.append((key, value, written, out))
        elif isinstance(value, (list, tuple)):
            for j, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    found.append((f"{key}.{j}", item, written, out))
    return found


def with_unannotated_writes(info: OpInfo, args: tuple, found: list[TensorArgument]) -> list[TensorArgument]:
    """`found` with the arguments an op writes unannotated (op_info.UNANNOTATED_WRITES) marked written, where its
    flag says it writes them this call (batch norm in training mode)."""
    assert info.unannotated_writes is not None
    positions, flag = info.unannotated_writes
    if not (len(args) > flag and args[flag] is True):
        return found
    targets = {identity(args[p]) for p in positions if p < len(args) and isinstance(args[p], torch.Tensor)}
    return [(name, t, written or identity(t) in targets, out) for name, t, written, out in found]


def output_tensors(result: Any) -> list[tuple[str, torch.Tensor]]:
    """(position, tensor) for every tensor an op returned: "0", or "1.0" inside a returned list."""
    if isinstance(result, torch.Tensor):
        return [("0", result)]
    if isinstance(result, (list, tuple)):
        out = []
        for j, item in enumerate(result):
            if isinstance(item, torch.Tensor):
                out.append((str(j), item))
            elif isinstance(item, (list, tuple)):
                out.extend((f"{j}.{k}", t) for k, t in enumerate(item) if isinstance(t, torch.Tensor))
        return out
    return []


def is_fake_context(tensor_args: list[TensorArgument]) -> bool:
    """Whether the op runs on fake tensors (under a FakeTensorMode, or with a FakeTensor argument)."""
    if _len_torch_dispatch_stack() and isinstance(_get_current_dispatch_mode(), FakeTensorMode):
        return True
    for _, t, _, _ in tensor_args:
        if type(t) not in PLAIN_TENSORS and isinstance(t, FakeTensor):
            return True
    return False


def has_nonfinite_scalar(args: tuple, kwargs: dict) -> bool:
    """Whether a Python float argument is NaN or Inf (`masked_fill(mask, -inf)`: Inf on purpose)."""
    for value in args:
        if isinstance(value, float) and not math.isfinite(value):
            return True
    if kwargs:
        for value in kwargs.values():
            if isinstance(value, float) and not math.isfinite(value):
                return True
    return False


def tensor_version(t: torch.Tensor) -> int | None:
    """`t`'s version counter, or None for an inference-mode tensor, which has none."""
    try:
        return t._version
    except RuntimeError:
        return None
