"""The recorder: a TorchDispatchMode that streams one record per dispatched op.

For each op it writes the inputs' fingerprints taken *before* the op runs (so
in-place ops are seen), the outputs' fingerprints after, tensor ids for
dataflow, the nn.Module path and the user source line. All state lives on the
instance; nothing accumulates per op except the weak tensor -> id map, whose
entries die with their tensors.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
from torch._C._dynamo.eval_frame import set_eval_frame as _set_eval_frame
from torch._ops import HigherOrderOperator
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _get_current_dispatch_mode,
    _get_current_dispatch_mode_stack,
    _len_torch_dispatch_stack,
)

from tracediff.op_names import UNINITIALIZED_OUTPUT_OPS, op_name
from tracediff.record.after_import import AfterImport
from tracediff.record.backward_source import BackwardSources
from tracediff.record.fingerprints.device import DeviceFingerprints
from tracediff.record.fingerprints.fingerprint import (
    PLAIN_TENSORS,
    Scratch,
    fingerprint,
    fingerprint_in_place,
    has_data,
    is_zero_tensor,
)
from tracediff.record.functorch import outside_transforms, transforms_involved
from tracediff.record.held_gc import HeldRecordsAllowance
from tracediff.record.identity import identity
from tracediff.record.modules import ModuleStack
from tracediff.record.scope import RecordScope, WindowState
from tracediff.record.source import FusedSource, SourceFinder, SourceLocation
from tracediff.record.spmd_args import default_group, group_size, placement_kind, scalar_digest
from tracediff.record.storage_resizes import StorageResizes
from tracediff.record.tensor_table import TensorTable
from tracediff.trace.schema import CHECK, KERNEL, OP, REGION, Fingerprint, without_sketch
from tracediff.trace.writer import TraceWriter

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
}


def _is_fake_context(tensor_args: list[tuple[str, torch.Tensor, bool, bool]]) -> bool:
    """Whether the op runs on fake tensors (under a FakeTensorMode, or with a FakeTensor argument)."""
    if _len_torch_dispatch_stack() and isinstance(_get_current_dispatch_mode(), FakeTensorMode):
        return True
    for _, t, _, _ in tensor_args:
        if type(t) not in PLAIN_TENSORS and isinstance(t, FakeTensor):
            return True
    return False


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _is_written(arg: Any) -> bool:
    return arg is not None and arg.alias_info is not None and arg.alias_info.is_write


def _is_out_buffer(arg: Any) -> bool:
    """An out= buffer: its contents before the op are garbage, not an input value."""
    return arg is not None and arg.kwarg_only and _is_written(arg)


@dataclass(frozen=True)
class _OpInfo:
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

    @classmethod
    def of(cls, func: Any) -> _OpInfo:
        if isinstance(func, HigherOrderOperator):
            return cls.of_higher_order(func)
        arguments = tuple((a.name, _is_written(a), _is_out_buffer(a)) for a in func._schema.arguments)
        schema_name = func._schema.name
        takes_floats = any(kind in str(a.type) for a in func._schema.arguments for kind in ("float", "Scalar", "number"))
        return cls(op_name(func), arguments, {a[0]: a for a in arguments},
                   schema_name in _LAYOUT_VIEWS, schema_name in _REORDERING_VIEWS,
                   schema_name in UNINITIALIZED_OUTPUT_OPS,
                   _SCRATCH_OUTPUTS.get(schema_name, frozenset()), schema_name in _STORAGE_ALIASES,
                   _collective(func), takes_floats,
                   "always" if schema_name in _HOST_WAITS else "copy" if schema_name in _COPIES else None,
                   returns_views=_returns_views(func._schema), writes=any(written for _, written, _ in arguments),
                   skipped=func.namespace in _SKIPPED_NAMESPACES)

    @classmethod
    def of_higher_order(cls, func: HigherOrderOperator) -> _OpInfo:
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


# Whether a tensor shares another's storage (a view op that returned a view, not a copy or a new tensor): torch's
# function itself, not a Python wrapper (a frame per view op).
_is_alias_of: Callable[[torch.Tensor, torch.Tensor], bool] = torch._C._is_alias_of  # type: ignore[attr-defined]


def _collective(func: Any) -> str | None:
    """`_OpInfo.collective` of an op overload."""
    if any("c10d.Work" in str(r.type) for r in func._schema.returns):
        return "work"
    if func.namespace == "_c10d_functional":
        return "wait" if func._schema.name == "_c10d_functional::wait_tensor" else "functional"
    return None


@functools.lru_cache(maxsize=4096)
def _op_info_of(func: Any) -> _OpInfo:
    """`_OpInfo.of`, remembered for the process: an overload's schema never changes, and working it
    out costs more than recording the op (each recording session would pay it again for every op)."""
    return _OpInfo.of(func)


_NO_ARG = ("", False, False)


def _alias_owner(entry: list) -> tuple[torch.Tensor | None, list | None]:
    """For a `detach`/`alias` result (`entry`: its `TraceRecorder._entry`): the tensor it was made from,
    if still alive, and that tensor's entry, kept after it died (a script saving `p.detach()` of weights
    whose model is gone by the time it reads them); (None, None) for a tensor of its own."""
    shared = entry[4]
    return (None, None) if shared is None else (shared[0](), shared[1])


# Records held back before the recorder writes those it can without a host wait (TraceRecorder._emit,
# _make_room): four times as many at most, a few MiB.
HELD_RECORDS = 1024

# Container objects (dicts, lists) of a held record, about: the record, its lists, and per tensor its description,
# shape and fingerprint (HeldRecordsAllowance).
_CONTAINERS_PER_RECORD = 16

# Records written between two looks at whether the device is still busy, at a host wait (TraceRecorder.write_held).
WRITE_CHUNK = 32

# Views' fingerprints kept at most (TraceRecorder._view_fingerprint).
_VIEW_FINGERPRINTS = 4096

# Ops that make the host wait for a device's queue (the value or size of a result is read on the host), and the
# copies that do when they copy to the host.
_HOST_WAITS = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::is_nonzero",
                         "aten::equal"})
_COPIES = frozenset({"aten::_to_copy", "aten::copy_"})


def _device_waited_for(info: _OpInfo, args: tuple, kwargs: dict) -> int | None:
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


# Ops whose result shares its input's storage and version counter but is no view (no `_base`).
_STORAGE_ALIASES = frozenset({"aten::detach", "aten::alias"})


def _tensor_arguments(info: _OpInfo, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor, bool, bool]]:
    """(argument name, tensor, written, out buffer) for every tensor argument. By hand, not with
    torch.utils._pytree: an aten op's arguments nest one list deep at most, and pytree's
    `tree_flatten_with_path` costs 20 to 25 times as much per op (44 us vs 1.8: BENCHMARKS.md, issue 13;
    the probe, bench/pytree_args.py, is in git history at bdb0ceb)."""
    found: list[tuple[str, torch.Tensor, bool, bool]] = []
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


def _output_tensors(result: Any) -> list[tuple[str, torch.Tensor]]:
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


# The module holding the flag inductor sets (for DebugMode) while it benchmarks candidate kernels.
_INDUCTOR_BENCHMARK_FLAG_MODULE = "torch.utils._debug_mode._utils"


def _inductor_benchmarking() -> bool:
    """Whether inductor is benchmarking candidate kernels (their ops are not the program's)."""
    return bool(getattr(sys.modules.get(_INDUCTOR_BENCHMARK_FLAG_MODULE), "_IN_INDUCTOR_BENCHMARK", False))


def _has_nonfinite_scalar(args: tuple, kwargs: dict) -> bool:
    for value in args:
        if isinstance(value, float) and not math.isfinite(value):
            return True
    if kwargs:
        for value in kwargs.values():
            if isinstance(value, float) and not math.isfinite(value):
                return True
    return False


def local_shard(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local tensor (an attribute: no op, no collective); any other tensor itself."""
    if type(t).__name__ == "DTensor":
        local = getattr(t, "_local_tensor", None)
        if isinstance(local, torch.Tensor):
            return local
    return t


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # inference-mode tensors have no version counter
        return None


class TraceRecorder(TorchDispatchMode):
    """Records every dispatched op on real tensors to a `TraceWriter`."""

    # A higher-order operator (`flex_attention` run eagerly) reaches `__torch_dispatch__` with this mode taken off the
    # stack, and is recorded as one op; without it, torch raises NotImplementedError into the program.
    supports_higher_order_operators = True

    def __init__(self, writer: TraceWriter, *, exact: bool = False, spmd: bool | None = None,
                 scope: RecordScope | None = None) -> None:
        super().__init__()
        self.writer = writer
        self.exact = exact
        # Which ops are kept (record/scope.py): all of them, none (the light mode) or those of one call's window.
        self.scope = scope or RecordScope()
        self._window = WindowState(self.scope)
        # One rank of several (torchrun sets WORLD_SIZE): records carry what comparing ranks with each other
        # needs (record/spmd_args.py). None: as the environment says.
        self.spmd = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 if spmd is None else spmd
        self.process_group: dict[str, Any] | None = None  # the default group's backend and size, at a collective
        self.modules = ModuleStack()
        self.sources = SourceFinder()
        self.backward_sources = BackwardSources()
        self._tensor_ids: TensorTable[list] = TensorTable()
        self._tensor_table = self._tensor_ids.data  # its dict, read directly by `_describe`
        self._next_tensor_id = 0
        self._in_flight: set[int] = set()  # ids of functional collectives' outputs not yet waited for
        self._seq = 0
        self.ops = 0
        # Ops tracediff failed to record (its own error, never the program's): how many, and the first.
        self.failures = 0
        self.first_failure: str | None = None
        self.kernels = 0  # generated kernel launches: tells a run that ran inductor's code (narrowing)
        # Region stack: (region root module name) for each compiled region we are in.
        self._regions: list[str | None] = []
        # The same regions' (name, call number), innermost last: where a same-input check ran (record/judging/).
        self._region_calls: list[tuple[str, int]] = []
        # True while tracediff itself computes (fingerprints): those ops are not the program's. Outside a scope's
        # window too: every op then passes straight through.
        self._internal = not self._window.open
        # The thread that entered the recorder: other threads' regions and kernels are not recorded.
        self._thread: int | None = None
        # In a forked child (record/fork.py): nothing is recorded; the first op reports the child.
        self._in_child = False
        self._report_child: Callable[[], None] | None = None
        # Per-op and per-tensor facts that never change, worked out once (names are strings).
        self._names: dict[torch.dtype | torch.device, str] = {}  # dtypes' and devices' names
        self._op_infos: dict[int, _OpInfo] = {}  # by identity(op overload), see _op_info
        self._op_overloads: list[Any] = []  # the overloads filed there, held so that their identities stay theirs
        # CUDA fingerprints are computed on the device and read in batches; records
        # that hold one wait here, in order, until it is filled (see _emit).
        self.device_fingerprints: DeviceFingerprints | None = None
        self._held: deque[tuple[dict[str, Any], int]] = deque()
        self._held_allowance = HeldRecordsAllowance(HELD_RECORDS * _CONTAINERS_PER_RECORD)
        # Generated kernels' buffers by storage (CUDA or not, device index, address): the storage, the first buffer seen on
        # it and that buffer's entry (see link_kernel_buffers).
        self._kernel_storages: dict[tuple[bool, int, int], tuple[weakref.ref, weakref.ref, list]] = {}
        # Storages re-allocated outside the dispatcher (FSDP2's `resize_`): garbage until written.
        self.resizes = StorageResizes(before_resize=self.flush_fingerprints)
        self._dynamo_skips = AfterImport("torch._dynamo", self._skip_in_dynamo)
        self._grown_storages = self.resizes.grown
        self._scratch = Scratch()  # the host fingerprints' temporary, reused
        # Fingerprints of views by (base's id, its version, the view's geometry and dtype): each call of a
        # Linear makes a fresh `t(weight)`, whose value is the same while the weight is unchanged.
        self._view_fingerprints: dict[tuple, Fingerprint | None] = {}

    # Keep torch.compile's own tracing and compilation out of the recording and let
    # the requested backend run, instead of dynamo falling back to eager (as DebugMode does).
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    # -- tensors ---------------------------------------------------------------

    def _describe(self, arg: str, t: torch.Tensor, take_fingerprint: bool = True, mutated: bool = False,
                  written: bool = False, same_as: Fingerprint | None = None,
                  view_version: int | None = None) -> dict[str, Any]:
        """Metadata and fingerprint of one tensor.

        The recorded version `v` names one value of the tensor, for dataflow:
        torch's version counter plus the writes torch did not count.
        `mutated`: an op wrote `t` in place; autograd's ADInplaceOrView kernel
        bumps the counter only after this mode returns, so the value is filed
        under the coming version. `written`: generated code (an inductor
        kernel) wrote `t` behind the counter's back; count that write here.
        `same_as`: a fingerprint known to be `t`'s without reading it (a layout view).
        `view_version`: `t` is a view op's result, which becomes a view sharing its input's version counter once
        the op returns: that input's version as read (read later as a view, it is the same value).
        A view also names its base (`b`): a write through the view is a new value
        of the base's storage, which the diff's dataflow must follow. Views share
        their base's version counter, so the writes it missed are counted on the base.
        A functional collective's output is not read until `wait_tensor` completes it.
        """
        if t.is_nested:
            return self._describe_nested(arg, t, take_fingerprint, mutated or written)
        found = self._tensor_table.get(identity(t))  # `self._tensor_ids.get(t)`, inlined: every tensor of every op
        entry = found[1] if found is not None and found[0]() is t else self._new_entry(t)
        if take_fingerprint and self._in_flight and entry[0] in self._in_flight:
            take_fingerprint = False
        is_view = t._is_view()  # before `_base`: this runs for every tensor of every op
        if is_view or entry[4] is not None:
            owner, storage = self._storage(t, entry, is_view)
        else:  # the common case, inlined: a tensor of its own
            owner, storage = None, entry
        if written:
            storage[3] += 1
        garbage = False
        if self._grown_storages:  # `self.resizes.pending`, without a property call per tensor
            if mutated or written:
                self.resizes.written(t)
            else:
                counted = self.resizes.read(t)
                if counted is not None:
                    garbage = True
                    if not counted:  # the re-allocation made a new value, unseen by the version counter
                        storage[3] += 1
        # An alias shares its owner's counter only once the op making it has returned: read the owner's.
        try:
            version: int | None = (t if owner is None or is_view else owner)._version
        except RuntimeError:  # inference-mode tensors have no version counter
            version = None
        if version is not None:
            version += storage[3] + (1 if mutated else 0)
        if view_version is not None:
            version = view_version
        fp = None
        if take_fingerprint:
            if not (mutated or written) and version is not None and entry[1] == version:
                fp = entry[2]  # unchanged since last fingerprinted: one read per value
            elif same_as is not None:
                fp = same_as
                entry[1], entry[2] = version, fp
            elif is_view and owner is not None and version is not None and not (mutated or written):
                fp = self._view_fingerprint(t, storage[0], version)
                entry[1], entry[2] = version, fp
            else:
                fp = self._fingerprint(t)
                entry[1], entry[2] = version, fp
        names = self._names
        dtype, device = t.dtype, t.device
        dtype_name = names.get(dtype)
        if dtype_name is None:
            dtype_name = names[dtype] = _dtype_name(dtype)
        device_name = names.get(device)
        if device_name is None:
            device_name = names[device] = str(device)
        described = {"a": arg, "id": entry[0], "v": version, "dt": dtype_name, "sh": list(t.shape), "dev": device_name,
                     "fp": fp}
        if self.spmd and type(t).__name__ == "DTensor":
            described["pl"] = placement_kind(t)
        if storage is not entry:
            described["b"] = storage[0]
        if garbage:
            described["uninit"] = True
        return described

    def _describe_nested(self, arg: str, t: torch.Tensor, take_fingerprint: bool, written: bool) -> dict[str, Any]:
        """A nested tensor (`torch.nested`, the fast path of `nn.TransformerEncoder` with a padding mask) by what can
        be read: its values buffer's shape and fingerprint, and its layout (`nt`). It has no single shape (a ragged
        dimension), and a strided one no `sizes` at all."""
        entry = self._entry(t)
        try:
            version: int | None = t._version + (1 if written else 0)
        except RuntimeError:
            version = None
        fp = None
        try:
            values = t.values()
        except RuntimeError:  # a layout without a values buffer to read: unknown, never the program's error
            values = None
        if take_fingerprint and values is not None:
            if not written and version is not None and entry[1] == version:
                fp = entry[2]
            else:
                fp = self._fingerprint(values.detach())
                entry[1], entry[2] = version, fp
        return {"a": arg, "id": entry[0], "v": version, "dt": _dtype_name(t.dtype),
                "sh": [int(n) for n in values.shape] if values is not None else [], "dev": str(t.device), "fp": fp,
                "nt": str(t.layout).removeprefix("torch.")}

    def _view_fingerprint(self, t: torch.Tensor, base_id: int, version: int) -> Fingerprint | None:
        """A view's fingerprint, read once per value of its base and geometry: a view shares its base's
        version counter (and the writes it missed, counted on the base), and a base's id is never reused."""
        key = (base_id, version, t.shape, t.stride(), t.storage_offset(), t.dtype, t.is_conj(), t.is_neg())
        if key in self._view_fingerprints:
            return self._view_fingerprints[key]
        if len(self._view_fingerprints) >= _VIEW_FINGERPRINTS:  # most are of values gone by: start afresh
            self._view_fingerprints.clear()
        fp = self._view_fingerprints[key] = self._fingerprint(t)
        return fp

    def _storage(self, t: torch.Tensor, entry: list, is_view: bool | None = None) -> tuple[torch.Tensor | None, list]:
        """The tensor whose storage and version counter `t` shares (a view's base, what a `detach` or
        `alias` result was made from; None for a tensor of its own, or one whose owner died: it still
        shares the counter) and the entry keeping that storage's id and the writes its counter missed.
        `is_view`: `t._is_view()`, where the caller has it."""
        if t._is_view() if is_view is None else is_view:
            base = t._base
            if base is not None:
                return base, self._entry(base)
        owner, owner_entry = _alias_owner(entry)
        return owner, entry if owner_entry is None else owner_entry

    def _unreturned_writes(self, tensor_args: list[tuple[str, torch.Tensor, bool, bool]], returned: set[int],
                           versions_before: dict[int, int | None]) -> list[dict[str, Any]]:
        """An in-place multi-tensor op (AdamW's `_foreach_addcdiv_`, `_fused_adamw_`, `_fused_sgd_`) returns
        nothing: describe each tensor it wrote as an output, fingerprinted as the values it leaves, so the diff
        compares the update where it was made (the next read of a weight finds that fingerprint filed under
        its version: no second read). Where torch did not bump the tensor's counter under the dispatch mode
        (CPU's foreach ops), count the write, so a later read is a new value; where it did (CUDA's foreach
        kernels bump it themselves), the counter already names the new value."""
        written = []
        for name, t, is_written, _ in tensor_args:
            if is_written and identity(t) not in returned:
                counted = _version(t) != versions_before[identity(t)]
                written.append(self._describe(name, t, written=not counted))
        return written

    def _entry(self, t: torch.Tensor) -> list:
        """The tensor's [id, version fingerprinted at, fingerprint, writes the counter missed, alias of]:
        a `detach`/`alias` result shares another tensor's storage and version counter without being a
        view (no `_base`), so a write to either is a new value of both; the last entry holds that tensor
        (weakly) and its entry, or None."""
        entry = self._tensor_ids.get(t)
        return self._new_entry(t) if entry is None else entry

    def _new_entry(self, t: torch.Tensor) -> list:
        """File `t`, not in the table, under a new id (`_entry`)."""
        entry = [self._next_tensor_id, None, None, 0, None]
        self._next_tensor_id += 1
        self._tensor_ids.set(t, entry)
        return entry

    def link_kernel_buffers(self, tensors: Iterable[torch.Tensor]) -> None:
        """Generated code reinterprets one buffer as several tensors (inductor's `reinterpret_tensor`: two
        kernels each write half of a `cat`'s buffer, a third reads it whole), aliases torch knows nothing
        of (no `_base`). File each such tensor as an alias of the first kernel buffer seen on its storage,
        as a `detach` result is, so that a write through one is a new value of the others (`_describe`'s
        `b`) and the diff's dataflow follows it. That buffer may be gone (generated code deletes each
        alias after its kernel) while its storage lives on."""
        for t in tensors:
            entry = self._tensor_ids.get(t)
            if entry is not None and entry[4] is not None:
                continue  # filed as an alias already
            if t._is_view() or not has_data(t) or is_zero_tensor(t):
                continue
            if entry is None:
                entry = self._entry(t)
            storage = t.untyped_storage()
            key = (t.is_cuda, t.get_device(), storage.data_ptr())
            seen = self._kernel_storages.get(key)
            if seen is None or seen[0]() is not storage:  # a new storage (or the allocator reused the memory)
                self._kernel_storages[key] = (weakref.ref(storage), weakref.ref(t), entry)
            elif seen[2] is not entry:
                entry[4] = (seen[1], seen[2])
                entry[1] = None  # its versions count on the owner's storage from now on: fingerprint anew

    def _fingerprint(self, t: torch.Tensor) -> Fingerprint | None:
        """On the host, or for a CUDA tensor a placeholder filled when its batch is read
        (exact mode hashes bytes on the host, so it reads CUDA tensors at once). A DTensor is described by
        this rank's shard: its statistics as a whole would take collectives."""
        try:
            plain = type(t) in PLAIN_TENSORS
            if plain and not self.exact:
                if t.is_cuda:
                    device = self.device_fingerprints
                    queued = device.submit_to_queue(t) if device is not None else None  # no torch op, so no guard
                    if queued is not None:
                        return queued  # most of a forward's tensors
                elif (fp := fingerprint_in_place(t)) is not None:
                    return fp  # most of a CPU program's tensors: read in place, no dispatch to disable
            if not plain:
                t = local_shard(t)
                plain = type(t) in PLAIN_TENSORS
            # A plain tensor's statistics bypass every Python dispatch mode, this one included: each of the
            # dozen torch ops a fingerprint makes would otherwise come back through `__torch_dispatch__`
            # (about 3 us each on CPU). A subclass keeps its own dispatch, which knows how to read it.
            with torch._C._DisableTorchDispatch() if plain else contextlib.nullcontext():
                if t.is_cuda and not self.exact and has_data(t) and not is_zero_tensor(t):
                    if self.device_fingerprints is None:
                        self.device_fingerprints = DeviceFingerprints()
                        self._held_allowance.hold()  # records are held from now on (_emit)
                    return self.device_fingerprints.submit(t)
                return fingerprint(t, exact=self.exact, scratch=self._scratch)
        except Exception:  # noqa: BLE001 - a tensor we cannot read is unknown, never the program's error
            return None

    def before_writes(self, tensors: list[torch.Tensor]) -> None:
        """Generated code is about to write `tensors`: launch the queued device fingerprints if it may write one."""
        if self.device_fingerprints is not None:
            self.call_quietly(self.device_fingerprints.before_op, (tensors,), {})

    def flush_fingerprints(self) -> None:
        """Launch the device fingerprints still queued: call it before anything writes a tensor."""
        if self.device_fingerprints is not None:
            with self.quiet():
                self.device_fingerprints.flush()

    # -- writing records -----------------------------------------------------------

    def _emit(self, record: dict[str, Any]) -> None:
        """Write `record` now, or, once device fingerprints are in use, hold it (in order with the others) until
        the host is about to wait for the device (`before_host_wait`): a record may hold a fingerprint still on
        its way, and writing is host time the device's queue can hide. Past HELD_RECORDS records, those whose
        fingerprints have arrived are written at once (`_make_room`)."""
        if not self._window.open:  # outside the scope's window: nothing is kept
            return
        device = self.device_fingerprints
        if device is None and not self._held:
            self.writer.write(record)
            return
        self._held.append((record, device.submitted if device is not None else 0))
        if len(self._held) > HELD_RECORDS:
            self._make_room()

    def write_held(self, while_busy: bool = False, whole_stream: int | None = None) -> None:
        """Write the held records whose device fingerprints have arrived, in order, without waiting.

        `while_busy`: the program is about to wait for the device; write only while the device still has work
        queued (looked at every WRITE_CHUNK records), and leave the rest for the next wait. Past that point the
        program would be waiting for the recorder, not the device: a batch's records all at once (about 650 per
        batch in GPT-2) took 9 ms at a synchronize where the device had 6.5 ms left.
        `whole_stream`: the CUDA device whose current stream the program's wait is for in full, the batches of
        fingerprints queued there included. Then a record whose batch (on that device) is still on its way waits for
        it, and writing goes on while the device runs the program's work queued after it. Without that, where the device is behind the
        host at a wait (long kernels queued before it), no batch sealed since has arrived, and those records wait
        for a later wait, or are written op by op once too many are held (`_make_room`). Written op by op, the
        records of an eager GPT-2 forward took 2.5 ms of its 23.6 ms of host time on the H100.
        """
        device = self.device_fingerprints
        busy = device.busy_marker() if while_busy and device is not None else None
        if device is not None:
            device.poll()
        held, write = self._held, self.writer.write
        written = 0
        while held:
            resolved = device.resolved if device is not None else math.inf
            while held and held[0][1] <= resolved:
                write(held.popleft()[0])
                written += 1
                if busy is not None and written % WRITE_CHUNK == 0 and busy.query():
                    return
            if not (held and whole_stream is not None and busy is not None and device is not None
                    and device.read_sealed(whole_stream)):
                return

    def _make_room(self) -> None:
        """Too many records held (a program that does not wait for the device): write those whose fingerprints
        have arrived, as every op did before records waited for the host's waits. Past four times as many, wait
        for the older half's fingerprints too (the device is then far behind the host)."""
        self.write_held()
        device = self.device_fingerprints
        if device is not None and len(self._held) > 4 * HELD_RECORDS:
            device.wait_for(self._held[len(self._held) // 2][1])
            self.write_held()

    def before_host_wait(self, whole_stream: int | None = None) -> None:
        """The program is about to wait for the device (a synchronize, `.item()`, a copy to the host): write
        the held records whose fingerprints have arrived, on the recording's own thread. `whole_stream`: see
        `write_held`."""
        if self._held and not self._internal and not self._in_child and threading.get_ident() == self._thread:
            with self.quiet():
                self.write_held(while_busy=True, whole_stream=whole_stream)

    def finish(self) -> None:
        """Wait for the device fingerprints and write every record held back for them.

        If the device cannot be read any more (a kernel faulted), the missing
        fingerprints are written as null: the records themselves still stand.
        """
        device = self.device_fingerprints
        if device is None or self._in_child:
            return
        try:
            device.finish()
        except RuntimeError:
            for record, _ in self._held:
                for tensor in (*record.get("in", ()), *record.get("out", ())):
                    if tensor.get("fp") == {}:
                        tensor["fp"] = None
        while self._held:
            self.writer.write(self._held.popleft()[0])

    def _layout_view_fingerprint(self, info: _OpInfo, inputs: list[dict[str, Any]]) -> Fingerprint | None:
        """The input's fingerprint for a layout-only view op (`info.layout_view`, which the caller checks: most ops
        are not one), or None in exact mode (a hash depends on order)."""
        if self.exact or not inputs:
            return None
        fp = inputs[0].get("fp")
        if fp is None or not info.reorders:
            return fp
        if "n" in fp:  # every statistic but the order-dependent sketch
            return without_sketch(fp)
        # A device fingerprint still on its way: the same, once it comes.
        return self.device_fingerprints.derive_without_sketch(fp) if self.device_fingerprints is not None else None

    def describe_tensors(self, named: Iterable[tuple[str, torch.Tensor]], written: bool = False) -> list[dict[str, Any]]:
        """Describe tensors from outside dispatch (regions, kernels) without recording our own ops.

        written: generated code just wrote these tensors (see `_describe`).
        """
        named = list(named)
        previous, self._internal = self._internal, True
        try:
            if not transforms_involved(t for _, t in named):  # the common case, without the context manager
                return [self._describe(name, t, written=written) for name, t in named]
            described = []
            with outside_transforms(named) as plain:
                for name, t, level in plain:
                    tensor = self._describe(name, t, written=written)
                    if level is not None:
                        tensor["ft"] = level  # a torch.func wrapper, described by the tensor it wraps
                    described.append(tensor)
            return described
        finally:
            self._internal = previous

    def call_quietly(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """`fn(*args, **kwargs)` recording nothing inside: `quiet()` without a context manager's cost, for each
        generated kernel's launch."""
        previous, self._internal = self._internal, True
        try:
            return fn(*args, **kwargs)
        finally:
            self._internal = previous

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Record nothing inside: tracediff's own work, or a kernel launch (autotuning benchmarks)."""
        previous, self._internal = self._internal, True
        try:
            yield
        finally:
            self._internal = previous

    def pause(self) -> bool:
        """Record nothing until `resume` is given what this returns: for a span that is no one call (a CUDA
        graph's capture, begun and ended by two calls)."""
        previous, self._internal = self._internal, True
        return previous

    def resume(self, previous: bool) -> None:
        self._internal = previous

    @property
    def internal(self) -> bool:
        """True while tracediff itself is computing (its ops are not the program's),
        and always in a forked child, which records nothing."""
        return self._internal

    def records_here(self) -> bool:
        """Whether what runs on the calling thread belongs in this trace.

        The dispatch mode is thread-local: ops of a thread the program started
        never reach it, so that thread's compiled-region calls and kernel
        launches are left out too (they would interleave with the recording
        thread's records). Threads that carry the mode are recorded: autograd's
        device threads run a backward with the caller's thread-local state.
        """
        if self._in_child:
            return False
        if threading.get_ident() == self._thread:
            return True
        return any(mode is self for mode in _get_current_dispatch_mode_stack())

    def stop_in_child(self, report: Callable[[], None]) -> None:
        """After a fork, in the child: record nothing from now on; call `report` once,
        at the child's first op (so the parent can count children that ran ops).

        The child's ops are not the recorded process's; records held for device
        fingerprints belong to the parent, which writes them itself.
        """
        self._in_child = True
        self._internal = True  # the dispatch fast path: every op passes straight through
        self._report_child = report
        self._held.clear()
        self._held_allowance.release()
        self.device_fingerprints = None  # CUDA cannot be used in a forked child

    @property
    def next_index(self) -> int:
        """The index the next record will get (`tracediff repro` captures ops by index)."""
        return self._seq

    def user_line(self) -> SourceLocation | None:
        """The innermost line of the program's own code on the calling thread's stack (a compiled call's site)."""
        return self.sources.find(sys._getframe(1))[0]

    @property
    def region_call(self) -> tuple[str, int] | None:
        """The innermost compiled region being run and its call number, if any."""
        return self._region_calls[-1] if self._region_calls else None

    @property
    def region_root(self) -> str | None:
        """Module name of the innermost compiled region being run, if any."""
        return self._regions[-1] if self._regions else None

    # -- dispatch ----------------------------------------------------------------

    # torch wraps a mode's `__torch_dispatch__` in `torch._dynamo.disable`, so that dynamo never traces the
    # mode's own Python (an eager op run from a frame dynamo skipped reaches the mode with dynamo's frame
    # callback on). That wrapper costs four Python frames per op. Here dynamo is told to skip the frame of
    # `__torch_dispatch__` itself (`__enter__`), which turns the callback off before it calls any other
    # Python: the same effect (tests/test_recorder.py::test_dynamo_never_traces_the_recorder).
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Subclasses extend `_dispatch`: this frame is the one dynamo skips."""
        prior = _set_eval_frame(None)
        try:
            return self._dispatch(func, args, kwargs or {})
        finally:
            _set_eval_frame(prior)

    def _dispatch(self, func: Any, args: tuple, kwargs: dict) -> Any:
        info = None if self._internal else (self._op_infos.get(identity(func)) or self._op_info(func))
        if info is None or info.skipped or _inductor_benchmarking():
            if self._report_child is not None:  # a forked child's first op
                report, self._report_child = self._report_child, None
                report()
            return func(*args, **kwargs)
        tensor_args = _tensor_arguments(info, args, kwargs)
        if _is_fake_context(tensor_args):
            return func(*args, **kwargs)

        self._internal = True
        try:
            inputs = [self._describe(name, t, not out) for name, t, _, out in tensor_args]
            # Tensors the op writes (in-place self, out= buffers), by identity (record/identity.py), with their
            # versions before.
            written = {identity(t): _version(t) for _, t, w, _ in tensor_args if w} if info.writes else {}
            if written and self.device_fingerprints is not None:  # a queued tensor can change only by a write
                self.device_fingerprints.before_op([t for _, t, is_written, _ in tensor_args if is_written])
            if info.host_wait is not None and self._held:
                waited = _device_waited_for(info, args, kwargs)
                if waited is not None:
                    # The host is about to wait for the device (for the current stream: the op runs there): its time
                    # is free.
                    self.write_held(while_busy=True, whole_stream=waited)
        except Exception as e:  # noqa: BLE001 - tracediff's own failure: the op runs unrecorded, the program goes on
            self._internal = False
            self.failed(info.name, e)
            return func(*args, **kwargs)
        finally:
            self._internal = False

        result = func(*args, **kwargs)

        self._internal = True
        try:
            if written and self.resizes.pending:
                for _, t, is_written, _ in tensor_args:
                    if is_written:
                        self.resizes.written(t)
            if info.aliases_storage and isinstance(result, torch.Tensor) and tensor_args:
                source = tensor_args[0][1]
                owner, storage = self._storage(source, self._entry(source))
                self._entry(result)[4] = (weakref.ref(source if owner is None else owner), storage)
            same_as = self._layout_view_fingerprint(info, inputs) if info.layout_view else None
            returned = _output_tensors(result)
            if info.collective == "wait":
                self._in_flight.difference_update(self._entry(t)[0] for _, t in returned)
            if info.collective in ("work", "functional"):
                outputs = self._pending_collective_outputs(info, returned, {identity(t) for _, t, _, _ in tensor_args})
            elif info.returns_views and not info.reorders and tensor_args and inputs[0]["v"] is not None:
                # Not a transpose: its statistics come without their sketch (`same_as`), which its first read
                # as a view takes.
                source, version = tensor_args[0][1], inputs[0]["v"]
                outputs = [self._describe(name, t, same_as=same_as,
                                          view_version=version if _is_alias_of(t, source) else None)
                           for name, t in returned]
            else:
                outputs = [self._describe(name, t, mutated=identity(t) in written, same_as=same_as)
                           for name, t in returned]
            if written:
                outputs += self._unreturned_writes(tensor_args, {identity(t) for _, t in returned}, written)
            if info.uninitialized or info.scratch_outputs:
                for out in outputs:
                    if info.uninitialized or out["a"] in info.scratch_outputs:
                        out["uninit"] = True
            self._write_op(info, args, kwargs, inputs, outputs)
        except Exception as e:  # noqa: BLE001 - as above: the op ran, its record is lost
            self.failed(info.name, e)
        finally:
            self._internal = False
        return result

    def _op_info(self, func: Any) -> _OpInfo:
        """`_op_info_of(func)`, filed by the overload's identity for the ops after it (an OpOverload hashes in Python:
        the process-wide cache's lookup cost a Python call per op). Overloads live as long as the process, and
        the table holds them besides."""
        info = _op_info_of(func)
        self._op_infos[identity(func)] = info
        self._op_overloads.append(func)
        return info

    def _pending_collective_outputs(self, info: _OpInfo, returned: list[tuple[str, torch.Tensor]],
                                    arguments: set[int]) -> list[dict[str, Any]]:
        """The outputs of a collective still in flight: listed for dataflow, not read (a background thread
        or the network may be writing them). A tensor the collective writes in place (an argument it
        returns) gets a new value the version counter does not count, so the op that reads it after the
        wait reads (and fingerprints) the new value, not the one the collective was given."""
        outputs = [dict(self._describe(name, t, take_fingerprint=False, written=identity(t) in arguments), unread=True)
                   for name, t in returned]
        if info.collective == "functional":  # in flight until `wait_tensor` returns it
            self._in_flight.update(out["id"] for out in outputs)
        return outputs

    def _write_op(self, info: _OpInfo, args: tuple, kwargs: dict, inputs: list, outputs: list) -> None:
        # From the caller's frame, never a fixed depth above it: an op of autograd's device thread (a CUDA
        # backward) reaches `__torch_dispatch__` from C++, with no Python frame above it. The walk starts past
        # `_dispatch`'s caller (`__torch_dispatch__`, or a subclass's `_dispatch`): both are tracediff's, and reading
        # a frame's code is an audit event (record/identity.py), which `f_back` is not.
        dispatch = sys._getframe(1)
        caller = dispatch.f_back
        source, fx, from_compiled_graph = self.sources.find(caller.f_back if caller is not None else None)
        node = torch._C._current_autograd_node()
        if node is None:
            self.backward_sources.forward_op(source)
        elif fx is None and not from_compiled_graph:  # an eager backward op: named by the forward line that made its node
            source = self.backward_sources.of(node) or source
        modules = self.modules
        # Module hooks do not run inside compiled code: fall back to the region's module.
        module = modules.current_at(node) or self.region_root
        record: dict[str, Any] = {"t": OP, "i": self._seq, "op": info.name, "d": modules.depth + len(self._regions)}
        if fx is not None:
            root = self._regions[-1] if self._regions else None
            module = ".".join(p for p in (root, fx.module) if p) or module
            record["g"] = fx.graph
        record["m"] = module
        if source is not None:
            record["src"] = source.short
            record["path"] = source.path
            record["code"] = source.code
        record["in"] = inputs
        record["out"] = outputs
        if info.takes_floats and _has_nonfinite_scalar(args, kwargs):
            record["nfs"] = True  # e.g. masked_fill(mask, -inf): Inf on purpose, not a NaN origin
        if self.spmd:
            record["sa"] = scalar_digest(args, kwargs)
            if info.collective in ("work", "functional"):
                record["gs"] = group_size([a[0] for a in info.arguments], args, kwargs)
                self.process_group = self.process_group or default_group()
        if node is not None:
            record["bw"] = True
        self._emit(record)
        self._seq += 1
        self.ops += 1

    # -- generated kernels -------------------------------------------------------------

    def write_kernel(self, name: str, site: str | None, graph: str, fuses: list[dict[str, Any]],
                     inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], source: FusedSource) -> None:
        """One launch of an inductor-generated kernel (record/kernels.py)."""
        record: dict[str, Any] = {"t": KERNEL, "i": self._seq, "name": name, "site": site, "g": graph,
                                  "d": self.modules.depth + len(self._regions),
                                  "m": source.module or self.modules.current or self.region_root}
        if source.src:
            record.update(src=source.src, path=source.path, code=source.code)
        record.update(fuses=fuses, **{"in": inputs, "out": outputs})
        if self.modules.in_backward:
            record["bw"] = True
        self._emit(record)
        self._seq += 1
        self.kernels += 1

    # -- compiled regions ----------------------------------------------------------

    def region_enter(self, name: str, root: str | None, region: int, call: int,
                     inputs: list[tuple[str, torch.Tensor]]) -> None:
        self._enter_window(name, call)
        depth = self.modules.depth + len(self._regions)
        self._regions.append(root)
        self._region_calls.append((name, call))
        if not self._window.open:
            return
        self._emit({"t": REGION, "i": self._seq, "ev": "enter", "name": name, "r": region, "call": call,
                    "d": depth, "m": self.modules.current or root, "in": self.describe_tensors(inputs)})
        self._seq += 1

    def region_exit(self, name: str, region: int, call: int, outputs: list[tuple[str, torch.Tensor]]) -> None:
        if self._regions:
            self._regions.pop()
        if self._region_calls:
            self._region_calls.pop()
        if not self._window.open:
            return
        record = {"t": REGION, "i": self._seq, "ev": "exit", "name": name, "r": region, "call": call,
                  "d": self.modules.depth + len(self._regions), "out": self.describe_tensors(outputs)}
        self._emit(record)
        self._seq += 1

    def _enter_window(self, name: str, call: int) -> None:
        """A region's call may open or close the scope's window: ops are recorded inside it only."""
        was_open = self._window.open
        self._window.at_region_call(name, call)
        if self._window.open != was_open and not self._in_child:
            self._internal = not self._window.open

    # -- same-input checks ---------------------------------------------------------

    def write_check(self, record: dict[str, Any]) -> None:
        """One compiled call judged on its own inputs (record/judging/graph.py), in order with the ops around it. It takes no
        index of its own (`at`: the index of the record after it), so the ops' indices are those of a run
        recorded without the judge."""
        self._emit({"t": CHECK, "at": self._seq, "d": self.modules.depth + len(self._regions),
                    "m": self.modules.current or self.region_root, **record})

    def failed(self, what: str, error: Exception) -> None:
        """tracediff could not record `what` (an op's name): counted for the footer, the first one kept."""
        self.failures += 1
        if self.first_failure is None:
            text = str(error).strip()
            self.first_failure = f"{what}: {type(error).__name__}: {text.splitlines()[0][:300] if text else ''}"

    # -- lifetime ------------------------------------------------------------------

    def _skip_in_dynamo(self, dynamo: ModuleType) -> None:
        """Called from C++ with dynamo's callback possibly on: the dispatch entry, and the tensor table's weakref
        callback (a tensor dying inside a frame dynamo runs). Marked once dynamo is imported (`AfterImport`)."""
        dynamo.decorators.skip(TraceRecorder.__torch_dispatch__)
        dynamo.decorators.skip(self._tensor_ids.forget_callback)

    def __enter__(self) -> TraceRecorder:
        self._dynamo_skips.__enter__()
        self._thread = threading.get_ident()
        self.modules.__enter__()
        self.resizes.__enter__()
        # Without ops to record (the light mode) the dispatch mode is not entered: no op pays for it.
        return super().__enter__() if self.scope.records_ops else self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.scope.records_ops:
                super().__exit__(*exc)
        finally:
            self._held_allowance.release()
            self._dynamo_skips.__exit__(*exc)
            self.resizes.__exit__(*exc)
            self.modules.__exit__(*exc)

