"""What the recorder needs to know of an op overload, worked out once from its schema (`OpInfo`).

Which arguments it writes (in place, out=), whether it is a view that only re-lays-out its input, which outputs
are uninitialized memory or a kernel's scratch, whether it is a collective or makes the host wait for the device.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch._ops import HigherOrderOperator

from tracediff.op_names import UNINITIALIZED_OUTPUT_OPS, op_name

# Ops that mark profiler ranges or are tracediff's own bookkeeping, not computation.
_SKIPPED_NAMESPACES = frozenset({"profiler", "debug_mode_ops"})

# Views that only re-lay-out their input's elements (same elements, same count):
# every fingerprint statistic but the sketch is order-independent, so the output's is the input's.
_LAYOUT_VIEWS = frozenset(
    {"aten::t", "aten::transpose", "aten::permute", "aten::view", "aten::_unsafe_view", "aten::reshape",
     "aten::alias", "aten::detach", "aten::squeeze", "aten::unsqueeze", "aten::flatten", "aten::unflatten",
     "aten::view_as", "aten::numpy_T", "aten::mT", "aten::mH", "aten::adjoint"}
)
# Of those, the ones that reorder elements (row-major): the sketch, which depends on order, is taken anew.
_REORDERING_VIEWS = frozenset(
    {"aten::t", "aten::transpose", "aten::permute", "aten::numpy_T", "aten::mT", "aten::mH", "aten::adjoint"}
)

# Outputs that are a kernel's private scratch, kept for its backward: an RNN's
# workspace/reserve (`mkldnn_rnn_layer`'s output 3, `_cudnn_rnn`'s and
# `miopen_rnn`'s output 3). Parts of it are never written, so its bytes differ run
# to run like `empty`'s; marked the same way, by output name, and never compared.
_SCRATCH_OUTPUTS: dict[str, frozenset[str]] = {
    "aten::mkldnn_rnn_layer": frozenset({"3"}),
    "aten::_cudnn_rnn": frozenset({"3"}),
    "aten::miopen_rnn": frozenset({"3"}),
    # Fused attention's dropout state (philox seed and offset, flash's rng_state) and its empty debug outputs:
    # memory left unwritten without dropout (H200: eager and inductor recorded different bits there).
    "aten::_scaled_dot_product_flash_attention": frozenset({"6", "7", "8"}),
    "aten::_scaled_dot_product_efficient_attention": frozenset({"2", "3"}),
    "aten::_scaled_dot_product_cudnn_attention": frozenset({"6", "7", "8"}),
    "aten::_efficient_attention_forward": frozenset({"2", "3"}),
    "aten::_flash_attention_forward": frozenset({"2", "3", "4"}),
    # CTC's log_alpha, kept for its backward: allocated empty and written only up to each sequence's input length
    # (a speech model's padded batch under inductor: eager and compiled recorded different garbage past it).
    "aten::_ctc_loss": frozenset({"1"}),
    "aten::_cudnn_ctc_loss": frozenset({"1"}),
}

# Ops whose result shares its input's storage and version counter but is no view (no `_base`).
_STORAGE_ALIASES = frozenset({"aten::detach", "aten::alias"})

# Ops that make the host wait for a device's queue (the value or size of a result is read on the host), and the
# copies that do when they copy to the host.
_HOST_WAITS = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::is_nonzero",
                         "aten::equal"})
_COPIES = frozenset({"aten::_to_copy", "aten::copy_"})


# Ops that write arguments their schema does not mark as written, which torch's version counter does not count
# either: batch norm's running mean and variance (positions 3 and 4), written when `training` (position 5) is
# true. Eager CPU's train-mode BatchNorm runs `native_batch_norm`; a later read of the statistics (an SWA or EMA
# copy of the buffers, an eval-mode forward) would otherwise be filed under the value before the update.
UNANNOTATED_WRITES: dict[str, tuple[tuple[int, ...], int]] = {
    name: ((3, 4), 5) for name in ("aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm")}


def _is_written(arg: Any) -> bool:
    return arg is not None and arg.alias_info is not None and arg.alias_info.is_write


def _is_out_buffer(arg: Any) -> bool:
    """An out= buffer: its contents before the op are garbage, not an input value."""
    return arg is not None and arg.kwarg_only and _is_written(arg)


@dataclass(frozen=True)
class OpInfo:
    """What the recorder needs of an op's schema, worked out once per overload."""

    name: str  # "aten::addmm.out"
    arguments: tuple[tuple[str, bool, bool], ...]  # (name, written, out buffer) per schema argument
    by_name: dict[str, tuple[str, bool, bool]]
    layout_view: bool
    reorders: bool  # a layout view that changes the elements' row-major order (transpose)
    uninitialized: bool  # every output is uninitialized memory
    scratch_outputs: frozenset[str]  # names of outputs that are uninitialized scratch
    aliases_storage: bool  # returns its input's storage and version counter without being a view (detach)
    # A collective that completes after it returns (its outputs cannot be read then): "work", c10d's
    # (`allreduce_` returns a Work and writes its tensors in place without bumping their version
    # counters); "functional" (`all_reduce` returns a tensor); "wait", the op completing those
    # (`wait_tensor`); None for every other op.
    collective: str | None = None
    takes_floats: bool = True  # an argument may be a Python float (a scalar that can be Inf or NaN)
    # The host waits for the device's queue: "always" (`.item()`, `nonzero`), "copy" (a copy, if to the host).
    host_wait: str | None = None
    # Returns views of its first argument (`slice`, `t`, `split`; `to` or `reshape` where they do not copy): torch
    # makes them views, sharing that argument's version counter, only once the op has returned through this mode.
    returns_views: bool = False
    writes: bool = False  # some argument is written (in place, out=): only then can the op change a tensor it is given
    skipped: bool = False  # an op of a namespace that is never the program's computation (_SKIPPED_NAMESPACES)
    # `set_` onto a storage: its result holds whatever that storage holds, which no op of the record wrote if the
    # storage is new (record/storage_resizes.py: a storage's own `copy_` into a fresh one, as `deepcopy` makes it).
    sets_storage: bool = False
    # Arguments written though the schema does not say so, and the flag argument that says whether they are
    # (UNANNOTATED_WRITES); None for every other op.
    unannotated_writes: tuple[tuple[int, ...], int] | None = None

    @classmethod
    def of(cls, func: Any) -> OpInfo:
        if isinstance(func, HigherOrderOperator):
            return cls.of_higher_order(func)
        arguments = tuple((a.name, _is_written(a), _is_out_buffer(a)) for a in func._schema.arguments)
        schema_name = func._schema.name
        takes_floats = any(kind in str(a.type) for a in func._schema.arguments for kind in ("float", "Scalar", "number"))
        unannotated = UNANNOTATED_WRITES.get(schema_name) if func._overloadname == "default" else None
        return cls(op_name(func), arguments, {a[0]: a for a in arguments},
                   schema_name in _LAYOUT_VIEWS, schema_name in _REORDERING_VIEWS,
                   schema_name in UNINITIALIZED_OUTPUT_OPS,
                   _SCRATCH_OUTPUTS.get(schema_name, frozenset()), schema_name in _STORAGE_ALIASES,
                   _collective(func), takes_floats,
                   "always" if schema_name in _HOST_WAITS else "copy" if schema_name in _COPIES else None,
                   returns_views=_returns_views(func._schema),
                   writes=unannotated is not None or any(written for _, written, _ in arguments),
                   skipped=func.namespace in _SKIPPED_NAMESPACES,
                   sets_storage=schema_name == "aten::set_" and func._overloadname.startswith("source_Storage"),
                   unannotated_writes=unannotated)

    @classmethod
    def of_higher_order(cls, func: HigherOrderOperator) -> OpInfo:
        """A higher-order operator run eagerly (`flex_attention`'s reference, `torch.cond`): recorded as one op,
        `higher_order::flex_attention`, as inductor's provenance names it. It has no schema: its tensors are
        named by position, and none is taken as written (one that writes is functionalized before it runs)."""
        return cls(f"{func.namespace}::{func.name()}", (), {}, False, False, False, frozenset(), False)


def _returns_views(schema: Any) -> bool:
    """Whether every tensor an op returns is a view of its first argument (an alias that is not written)."""
    first = schema.arguments[0] if schema.arguments else None
    if first is None or first.alias_info is None or first.alias_info.is_write or schema.name in _STORAGE_ALIASES:
        return False
    sets, into_list = first.alias_info.before_set, "*" in first.alias_info.after_set  # `split`: Tensor(a -> *)
    returned = [r.alias_info for r in schema.returns]
    return bool(returned) and all(a is not None and not a.is_write and (a.before_set == sets or into_list)
                                  for a in returned)


def _collective(func: Any) -> str | None:
    """`OpInfo.collective` of an op overload."""
    if any("c10d.Work" in str(r.type) for r in func._schema.returns):
        return "work"
    if func.namespace == "_c10d_functional":
        return "wait" if func._schema.name == "_c10d_functional::wait_tensor" else "functional"
    return None


@functools.lru_cache(maxsize=4096)
def op_info_of(func: Any) -> OpInfo:
    """`OpInfo.of`, remembered for the process: an overload's schema never changes, and working it
    out costs more than recording the op (each recording session would pay it again for every op)."""
    return OpInfo.of(func)


def device_waited_for(info: OpInfo, args: tuple, kwargs: dict) -> int | None:
    """The CUDA device whose current stream (where the op runs) the host waits for by running this op (`info.host_wait`
    is set), or None where it does not wait."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    if info.host_wait == "always":
        return args[0].get_device() if args[0].is_cuda else None
    if info.name.startswith("aten::_to_copy"):  # source first, the target device a keyword
        target = kwargs.get("device")
        waits = args[0].is_cuda and target is not None and torch.device(target).type == "cpu"
        return args[0].get_device() if waits else None
    source = args[1] if len(args) > 1 else None  # copy_(destination, source, non_blocking)
    non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    if isinstance(source, torch.Tensor) and source.is_cuda and not args[0].is_cuda and not non_blocking:
        return source.get_device()
    return None
