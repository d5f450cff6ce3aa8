"""Op names as traces spell them, and their parts: one place for every module that reads or writes them.

A trace names an op as torch's `OpOverload.name()` does: `aten::cos` (the default overload),
`aten::addmm.out`, `aten::add_.Tensor`. FX graphs and inductor's generated code name it
`aten.cos.default`.
"""

from __future__ import annotations

import functools
from typing import Any

# Ops whose outputs are uninitialized memory: their values differ run to run by
# design, so they are marked and never compared; a later op that *reads* them
# before writing is what a nondeterminism report points at.
UNINITIALIZED_OUTPUT_OPS = frozenset(
    {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
     "aten::empty_permuted"}
)


def op_name(func: Any) -> str:
    """`aten::cos` for a default overload, `aten::addmm.out` otherwise (an `OpOverload`'s own name)."""
    return func.name()


def from_target(target: str) -> str:
    """An FX node's target as inductor prints it: `aten.sin.default` -> `aten::sin`,
    `aten.add.Tensor` -> `aten::add.Tensor`."""
    namespace, _, rest = target.partition(".")
    name, _, overload = rest.partition(".")
    return f"{namespace}::{name}" + ("" if overload in ("", "default") else f".{overload}")


def parts(op: str) -> tuple[str, str, str]:
    """`aten::add.Tensor` -> ("aten", "add", "Tensor"); the default overload is "default"."""
    namespace, _, rest = op.partition("::")
    name, _, overload = rest.partition(".")
    return namespace, name, overload or "default"


def packet(op: str) -> str:
    """`aten::fill_.Scalar` -> `aten::fill_`: the op without its overload. In-place ops stay apart
    from their functional forms (see `base_op`)."""
    return op.split(".", 1)[0]


def base_op(op: str) -> str:
    """`aten::addmm.out` -> `aten::addmm`; `aten::add_.Tensor` -> `aten::add` (the functional form)."""
    return _base_op(op)


# A diff asks `base_op` of every record several times (pass 1, the walk), of a trace's few hundred op names and
# its kernels' names: remembered, it is a dict lookup.
@functools.lru_cache(maxsize=1 << 14)
def _base_op(op: str) -> str:
    base = packet(op)
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


def is_in_place(op: str) -> bool:
    """`aten::add_.Tensor`: an op that writes its first argument (by the trailing underscore)."""
    base = packet(op)
    return base.endswith("_") and not base.endswith("__")


def short(op: str) -> str:
    """`aten::addmm.out` -> `addmm`: the functional form without its namespace, for kernel names."""
    return base_op(op).removeprefix("aten::")


# The namespaces of c10d's collectives and the functional ones compiled code and DTensor call.
COLLECTIVE_NAMESPACES = ("c10d::", "_c10d_functional::", "_c10d_functional_autograd::")


def is_collective(op: str | None) -> bool:
    """`c10d::allreduce_`, `_c10d_functional::all_reduce`, `wait_tensor`, ...: a collective or its wait."""
    return bool(op) and str(op).startswith(COLLECTIVE_NAMESPACES)


# Ops that move no values: their number differs between eager and compiled
# runs for bookkeeping reasons (autograd detaches, aliasing), never numerics.
NO_VALUE_OPS = frozenset({"aten::detach", "aten::alias", "aten::lift_fresh", "aten::lift_fresh_copy", "aten::_to_copy_meta"})
