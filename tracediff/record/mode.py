"""The recorder: a TorchDispatchMode that streams one record per dispatched op.

For each op it writes the inputs' fingerprints taken *before* the op runs (so
in-place ops are seen), the outputs' fingerprints after, tensor ids for
dataflow, the nn.Module path and the user source line. Compiled regions' calls,
generated kernels' launches and same-input checks are written in order with the
ops. All state lives on the instance; nothing accumulates per op except the weak
tensor -> id map, whose entries die with their tensors.

What an op is (record/op_info.py), its tensors (record/op_arguments.py), how a
tensor is described (record/tensor_describer.py), an op's outputs
(record/op_outputs.py) and records held for device fingerprints
(record/held_records.py) are modules of their own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

import torch
from torch._C._dynamo.eval_frame import set_eval_frame as _set_eval_frame
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

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
from tracediff.record.held_records import HeldRecords
from tracediff.record.identity import identity
from tracediff.record.modules import ModuleStack
from tracediff.record.op_arguments import (
    has_nonfinite_scalar,
    is_fake_context,
    output_tensors,
    tensor_arguments,
    tensor_version,
    with_unannotated_writes,
)
from tracediff.record.op_info import OpInfo, device_waited_for, op_info_of
from tracediff.record.op_outputs import describe_outputs
from tracediff.record.scope import RecordScope, WindowState
from tracediff.record.source import FusedSource, SourceFinder, SourceLocation
from tracediff.record.spmd_args import default_group, group_size, scalar_digest
from tracediff.record.storage_resizes import StorageResizes
from tracediff.record.tensor_describer import TensorDescriber
from tracediff.trace.schema import CHECK, KERNEL, OP, REGION, Fingerprint, without_sketch
from tracediff.trace.writer import TraceWriter

# The module holding the flag inductor sets (for DebugMode) while it benchmarks candidate kernels.
_INDUCTOR_BENCHMARK_FLAG_MODULE = "torch.utils._debug_mode._utils"


def _inductor_benchmarking() -> bool:
    """Whether inductor is benchmarking candidate kernels (their ops are not the program's)."""
    return bool(getattr(sys.modules.get(_INDUCTOR_BENCHMARK_FLAG_MODULE), "_IN_INDUCTOR_BENCHMARK", False))


def local_shard(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local tensor (an attribute: no op, no collective); any other tensor itself."""
    if type(t).__name__ == "DTensor":
        local = getattr(t, "_local_tensor", None)
        if isinstance(local, torch.Tensor):
            return local
    return t


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
        # Storages re-allocated outside the dispatcher (FSDP2's `resize_`): garbage until written.
        self.resizes = StorageResizes(before_resize=self.flush_fingerprints)
        # Each tensor's id, version and last fingerprint (record/tensor_describer.py), read through `_fingerprint`.
        self.tensors = TensorDescriber(self._fingerprint, self.resizes, self.spmd)
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
        # Per-op facts that never change, worked out once.
        self._op_infos: dict[int, OpInfo] = {}  # by identity(op overload), see _op_info
        self._op_overloads: list[Any] = []  # the overloads filed there, held so that their identities stay theirs
        # CUDA fingerprints are computed on the device and read in batches; records
        # that hold one wait in `held`, in order, until it is filled (see _emit).
        self.device_fingerprints: DeviceFingerprints | None = None
        self.held = HeldRecords(writer)
        self._held = self.held.records  # its deque, tested per record by `_emit`
        self._dynamo_skips = AfterImport("torch._dynamo", self._skip_in_dynamo)
        self._scratch = Scratch()  # the host fingerprints' temporary, reused

    # Keep torch.compile's own tracing and compilation out of the recording and let
    # the requested backend run, instead of dynamo falling back to eager (as DebugMode does).
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True


    # -- tensors ---------------------------------------------------------------

    def describe_tensors(self, named: Iterable[tuple[str, torch.Tensor]], written: bool = False) -> list[dict[str, Any]]:
        """Describe tensors from outside dispatch (regions, kernels) without recording our own ops.

        written: generated code just wrote these tensors (see `TensorDescriber.describe`).
        """
        named = list(named)
        describe = self.tensors.describe
        previous, self._internal = self._internal, True
        try:
            if not transforms_involved(t for _, t in named):  # the common case, without the context manager
                return [describe(name, t, written=written) for name, t in named]
            described = []
            with outside_transforms(named) as plain:
                for name, t, level in plain:
                    tensor = describe(name, t, written=written)
                    if level is not None:
                        tensor["ft"] = level  # a torch.func wrapper, described by the tensor it wraps
                    described.append(tensor)
            return described
        finally:
            self._internal = previous

    def link_kernel_buffers(self, tensors: Iterable[torch.Tensor]) -> None:
        """Generated code's buffers that reinterpret one storage, filed as aliases (`TensorDescriber`'s)."""
        self.tensors.link_kernel_buffers(tensors)

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
                        self.held.start_holding()  # records are held from now on (_emit)
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
        its way, and writing is host time the device's queue can hide (record/held_records.py)."""
        if not self._window.open:  # outside the scope's window: nothing is kept
            return
        device = self.device_fingerprints
        if device is None and not self._held:
            self.writer.write(record)
            return
        self.held.add(record, device)

    def before_host_wait(self, whole_stream: int | None = None) -> None:
        """The program is about to wait for the device (a synchronize, `.item()`, a copy to the host): write
        the held records whose fingerprints have arrived, on the recording's own thread. `whole_stream`: see
        `HeldRecords.write_arrived`."""
        if self._held and not self._internal and not self._in_child and threading.get_ident() == self._thread:
            with self.quiet():
                self.held.write_arrived(self.device_fingerprints, while_busy=True, whole_stream=whole_stream)

    def finish(self) -> None:
        """Wait for the device fingerprints and write every record held back for them (`HeldRecords.write_all`)."""
        device = self.device_fingerprints
        if device is None or self._in_child:
            return
        self.held.write_all(device)

    def _layout_view_fingerprint(self, info: OpInfo, inputs: list[dict[str, Any]]) -> Fingerprint | None:
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
        self.held.drop()
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
        tensor_args = tensor_arguments(info, args, kwargs)
        if info.unannotated_writes is not None:
            tensor_args = with_unannotated_writes(info, args, tensor_args)
        if is_fake_context(tensor_args):
            return func(*args, **kwargs)

        tensors = self.tensors
        self._internal = True
        try:
            inputs = [tensors.describe(name, t, not out) for name, t, _, out in tensor_args]
            # Tensors the op writes (in-place self, out= buffers), by identity (record/identity.py), with their
            # versions before.
            written = {identity(t): tensor_version(t) for _, t, w, _ in tensor_args if w} if info.writes else {}
            if written and self.device_fingerprints is not None:  # a queued tensor can change only by a write
                self.device_fingerprints.before_op([t for _, t, is_written, _ in tensor_args if is_written])
            if info.host_wait is not None and self._held:
                waited = device_waited_for(info, args, kwargs)
                if waited is not None:
                    # The host is about to wait for the device (for the current stream: the op runs there): its time
                    # is free.
                    self.held.write_arrived(self.device_fingerprints, while_busy=True, whole_stream=waited)
        except Exception as e:  # noqa: BLE001 - tracediff's own failure: the op runs unrecorded, the program goes on
            self._internal = False
            if not _on_lazy_parameters(tensor_args):  # no data to record, no failure (a LazyLinear's weight)
                self.failed(info.name, e)
            return func(*args, **kwargs)
        finally:
            self._internal = False

        result = func(*args, **kwargs)

        self._internal = True
        try:
            if written and self.resizes.watching_writes:
                for _, t, is_written, _ in tensor_args:
                    if is_written:
                        self.resizes.written(t)
            if info.aliases_storage and isinstance(result, torch.Tensor) and tensor_args:
                tensors.file_alias(result, tensor_args[0][1])
            same_as = self._layout_view_fingerprint(info, inputs) if info.layout_view else None
            outputs = describe_outputs(tensors, info, tensor_args, inputs, output_tensors(result), written, same_as)
            self._write_op(info, args, kwargs, inputs, outputs)
        except Exception as e:  # noqa: BLE001 - as above: the op ran, its record is lost
            if not _on_lazy_parameters(tensor_args):
                self.failed(info.name, e)
        finally:
            self._internal = False
        return result

    def _op_info(self, func: Any) -> OpInfo:
        """`op_info_of(func)`, filed by the overload's identity for the ops after it (an OpOverload hashes in Python:
        the process-wide cache's lookup cost a Python call per op). Overloads live as long as the process, and
        the table holds them besides."""
        info = op_info_of(func)
        self._op_infos[identity(func)] = info
        self._op_overloads.append(func)
        return info

    def _write_op(self, info: OpInfo, args: tuple, kwargs: dict, inputs: list, outputs: list) -> None:
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
        if info.takes_floats and has_nonfinite_scalar(args, kwargs):
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
        dynamo.decorators.skip(self.tensors.forget_callback)

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
            self.held.release()
            self._dynamo_skips.__exit__(*exc)
            self.resizes.__exit__(*exc)
            self.modules.__exit__(*exc)


_LAZY = (torch.nn.UninitializedParameter, torch.nn.UninitializedBuffer)


def _on_lazy_parameters(tensor_args: list[Any]) -> bool:
    """Does the op read a lazy module's parameter before its first forward (`nn.LazyLinear`)? It has no shape or
    data yet: not an op tracediff failed to record. Asked only when recording one failed."""
    return any(isinstance(t, _LAZY) for _, t, _, _ in tensor_args)
