"""Run a program's floating-point math in float64: the noise reference for `--calibrate`.

A float32 program's result differs from the exact one by its own rounding
error; a compiler that reorders a reduction or fuses math legitimately
changes that error by a similar amount. Re-running the reference with every
op computed in float64 measures the error, per op, so a difference can be
judged against it (torch._dynamo.utils.same compares against an fp64
reference for the same reason).

`torch.set_default_dtype(torch.float64)` is not enough and not right: tensors
the program makes as float32 stay float32, and random draws in float64 are
different numbers, not more precise ones. This mode works at dispatch level
instead, below the recorder:

- a functional op that reads a float16/bfloat16/float32 tensor gets float64
  copies of its floating arguments (exact) and computes in float64; what it
  returns flows on in float64;
- factories (`torch.empty`, `torch.zeros`, ...) and random ops make tensors in
  the program's dtype, so parameters and random draws are the same numbers as
  in the float32 run (a random op reading a float64 value draws in the
  dtype the program has it in);
- views and in-place ops run as they are: a view keeps aliasing its base, and
  an in-place write into a float32 tensor (a parameter update, a slice
  assignment) stores float32, as the program says.

So both runs see the same inputs, parameters and random numbers; only the
rounding of computed values differs.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map_only
from torch.utils.weak import WeakTensorKeyDictionary

_WIDER = {torch.float32: torch.float64, torch.float16: torch.float64, torch.bfloat16: torch.float64,
          torch.complex64: torch.complex128}


def _aliases_or_writes(func: Any) -> bool:
    schema = func._schema
    return any(r.alias_info is not None for r in schema.returns) or schema.is_mutable


class Float64Upcast(TorchDispatchMode):
    """While active, every functional op on floating tensors computes in float64 (complex128)."""

    def __init__(self) -> None:
        super().__init__()
        self._program_dtype = WeakTensorKeyDictionary()  # computed float64 tensor -> dtype the program has it in

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded in func.tags:
            return self._random(func, args, kwargs)
        if _aliases_or_writes(func):
            return func(*args, **kwargs)
        floats = [t for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())]
        if not any(t.dtype in _WIDER for t in floats):
            return func(*args, **kwargs)  # factories and float64 math: nothing to widen
        program = functools.reduce(torch.promote_types, [self._program_dtype.get(t, t.dtype) for t in floats])
        wide_args, wide_kwargs = tree_map_only(torch.Tensor, lambda t: t.to(_WIDER.get(t.dtype, t.dtype)), (args, kwargs))
        out = func(*wide_args, **wide_kwargs)
        if program in _WIDER:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.dtype == _WIDER[program]:
                    self._program_dtype[t] = program
        return out

    def _random(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Draw in the program's dtype, so the numbers equal the float32 run's; an in-place draw is written back."""
        pairs: list[tuple[torch.Tensor, torch.Tensor]] = []

        def narrow(t: torch.Tensor) -> torch.Tensor:
            dtype = self._program_dtype.get(t)
            if dtype is None:
                return t
            low = t.to(dtype)
            pairs.append((t, low))
            return low

        n_args, n_kwargs = tree_map_only(torch.Tensor, narrow, (args, kwargs))
        out = func(*n_args, **n_kwargs)
        if not pairs or not func._schema.is_mutable:
            return out
        for wide, low in pairs:
            wide.copy_(low)
        by_id = {id(low): wide for wide, low in pairs}
        return tree_map_only(torch.Tensor, lambda t: by_id.get(id(t), t), out)
