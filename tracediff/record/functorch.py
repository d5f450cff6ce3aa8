"""torch.func transforms seen from outside the dispatcher.

Inside the dispatch mode ops arrive on plain tensors with no transform
active: functorch's layers are handled above the Python dispatch key. A
compiled region's call and an inductor kernel launch are seen outside the
dispatcher, though: a function called under `vmap`, `grad` or `jvp` gets
functorch's wrapper tensors (BatchedTensor, GradTrackingTensor) while the
transforms' interpreter stack is active, and reading one there runs
tracediff's statistics through the transforms (a batched tensor has no
storage: RuntimeError, the user's program would die of it).

`outside_transforms` hands back each tensor unwrapped down to the one that
holds the data (a batched tensor: its whole batch) together with the level of
its outermost wrapper, and clears the interpreter stack while tracediff reads
them (as torch's own meta-tensor conversion does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch


def unwrapped(t: torch.Tensor) -> tuple[torch.Tensor, int | None]:
    """`t` without its functorch wrappers, and the outermost wrapper's level (None: not wrapped)."""
    functorch = torch._C._functorch
    if not functorch.is_functorch_wrapped_tensor(t):
        return t, None
    level = functorch.maybe_get_level(t)
    while functorch.is_functorch_wrapped_tensor(t):
        t = functorch.get_unwrapped(t)
    return t, level


def transforms_involved(tensors: Iterable[torch.Tensor]) -> bool:
    """Whether reading `tensors` needs `outside_transforms`: a transform is active, or one of them is wrapped."""
    functorch = torch._C._functorch
    return functorch.peek_interpreter_stack() is not None or any(functorch.is_functorch_wrapped_tensor(t) for t in tensors)


@contextlib.contextmanager
def outside_transforms(
    named: Iterable[tuple[str, torch.Tensor]],
) -> Iterator[list[tuple[str, torch.Tensor, int | None]]]:
    """(name, unwrapped tensor, transform level or None) for each tensor, read with no transform active."""
    plain = [(name, *unwrapped(t)) for name, t in named]
    if torch._C._functorch.peek_interpreter_stack() is None:
        yield plain
        return
    from torch._functorch.pyfunctorch import temporarily_clear_interpreter_stack

    with temporarily_clear_interpreter_stack():
        yield plain
