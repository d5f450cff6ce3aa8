"""Fingerprints of accelerator tensors without a host sync per op.

Reading a CUDA statistic on the host (`.tolist()`) waits for the GPU to finish
everything queued before it, so a recorder that reads each fingerprint
serializes the program: the CPU can no longer run ahead of the GPU. Here each
fingerprint is computed on the device into one row of a batch buffer and the
recorder gets an empty dict that is filled later. When a batch is full it is
reduced on the device, copied to pinned host memory asynchronously and marked
with a CUDA event; the rows are read once that event has passed, which by then
it usually has, so the only waits left are a bounded number of batches in
flight and the final one at the end of the recording.

Per tensor: one Triton kernel (record/fingerprints/kernel.py) where Triton is
installed, else a few torch reductions; both read the tensor once and write
per-program partial statistics [sum, l1, sum of squares, max, nan, inf, and
the sketch's signed sums] over the finite elements, accumulated in float64. The batch reduction over the
partials is done by torch in a fixed order, so a fingerprint is deterministic.
All device work goes to the current stream, which is where the program's
ops run unless it juggles streams itself.

A kernel launch costs the host more than anything else per fingerprint, so
tensors up to QUEUE_BYTES wait in a queue and up to eight of one dtype are
fingerprinted by one launch. A queued tensor is held (its memory cannot be
reused) and must not change before its launch: the recorder calls `before_op`
with the tensors each op or generated kernel writes, which flushes the queue
where one shares memory with a queued tensor, and `flush()` before any storage
re-allocation; the queue is also flushed when it holds eight tensors or
QUEUE_BYTES, when a tensor of another dtype or stream comes, and when the
batch is sealed. Either way a tensor's fingerprint is the same bits. A strided
view goes to the queue as a contiguous copy, or, past STRIDED_READ_BYTES, to a
launch of its own that reads it in place (no copy: inductor reads GPT-2's tied
147 MiB embedding transposed on every call).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from tracediff.record.fingerprints.fingerprint import (
    PLAIN_TENSORS,
    SKETCH_WIDTH,
    as_real,
    empty_fingerprint,
    fill_from_rows,
    sketch,
)
from tracediff.record.fingerprints.host_stats import memory_holds
from tracediff.trace.schema import Fingerprint, without_sketch

if TYPE_CHECKING:  # importing it needs Triton
    from tracediff.record.fingerprints.kernel import Launcher, Layout

# Fingerprints per batch (one device buffer, one host read) and batches read at most
# this late: bounds the records held back in memory, and how often the CPU waits.
BATCH = 512
IN_FLIGHT = 4
# Programs (partial rows) per fingerprint: enough to fill an H100/H200 for large tensors.
PROGRAMS = 264
# Bytes of tensors waiting for one launch at most: what recording may keep alive beyond the program.
QUEUE_BYTES = 64 << 20
_STATS = 6 + SKETCH_WIDTH  # sum, l1, sum of squares, max, nan, inf, the sketch's sums


@dataclass
class _Queue:
    """Tensors of one dtype and stream waiting for one launch, and their rows in the batch."""

    device: int
    stream: int
    dtype: torch.dtype
    tensors: list[torch.Tensor]
    rows: list[int]
    nbytes: int
    # [start, end) of each queued tensor's storage, worked out at the first `overlaps` (most queues never get
    # one: only an op that writes an argument asks) and extended after it.
    spans: list[tuple[int, int]]

    def overlaps(self, t: torch.Tensor) -> bool:
        """Whether `t` may share memory with a queued tensor (a view, an alias, a buffer generated code
        reuses). A tensor whose memory is not its storage's (a wrapper subclass such as DTensor, whose local
        tensor may be queued; a sparse tensor) may share anything."""
        if type(t) not in PLAIN_TENSORS:
            return True
        try:
            start, end = _storage_span(t)
        except (RuntimeError, NotImplementedError):  # no storage to tell by
            return True
        spans = self.spans
        spans.extend(_storage_span(queued) for queued in self.tensors[len(spans):])
        return any(start < other_end and other_start < end for other_start, other_end in spans)


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


@dataclass
class _Sealed:
    """A full batch whose statistics are on their way to the host."""

    event: Any  # torch.cuda.Event recorded after the copy; None for CPU tensors
    device: int  # the batch's device (`get_device()`: -1 for the CPU)
    host: torch.Tensor  # [rows, _STATS] float64, pinned
    slots: list[tuple[Fingerprint, int]]  # (placeholder, element count) per row


def _torch_partials(x: torch.Tensor, row: torch.Tensor) -> None:
    """Statistics of flat float `x` into `row[0]` with torch ops (no Triton): no host sync."""
    finite = torch.isfinite(x)
    nan = torch.isnan(x).sum()
    nonfinite = x.numel() - finite.sum()
    v = torch.where(finite, x, torch.zeros((), dtype=x.dtype, device=x.device))
    norm = torch.linalg.vector_norm
    l2 = norm(v, 2, dtype=torch.float64)
    stats = torch.stack([v.sum(dtype=torch.float64), norm(v, 1, dtype=torch.float64), l2 * l2,
                         norm(v, float("inf")).to(torch.float64), nan.to(torch.float64),
                         (nonfinite - nan).to(torch.float64)])
    row[0].copy_(torch.cat([stats, sketch(v)]))


def _kernel_launcher() -> Launcher | None:
    """The Triton kernels' launcher, or None without Triton (or when told to use torch ops)."""
    if os.environ.get("TRACEDIFF_DEVICE_FINGERPRINT", "") == "torch":
        return None
    try:
        from tracediff.record.fingerprints.kernel import Launcher
    except ImportError:
        return None
    return Launcher()


# Dtypes the Triton kernel reads as they are (it converts each element to float64 as it loads it).
_KERNEL_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
# Elements the kernel's int32 offsets reach (with room for a period's padding).
_KERNEL_MAX_ELEMENTS = 2**31 - 2**24


# A strided view larger than this is read in place by a launch of its own, where its copy would cost its size in
# device memory (GPT-2's tied embedding, read transposed by inductor's lm_head: 147 MiB); a smaller one is copied
# and queued, one launch for several (a launch costs the host more than a copy: eager GPT-2 reads about forty
# strided 12 MiB views per call).
STRIDED_READ_BYTES = QUEUE_BYTES


def strided_layout(shape: Sequence[int], strides: Sequence[int]) -> Layout | None:
    """The layout the kernel reads a strided tensor by: its dimensions with neighbours that are one run of
    memory merged and those of size 1 dropped, as the sizes of the last three and the strides of all four
    (padded in front with size 1). None past four dimensions."""
    sizes: list[int] = []
    steps: list[int] = []
    for size, stride in zip(shape, strides):
        if size == 1:
            continue
        if sizes and steps[-1] == size * stride:  # the previous dimension continues this one
            sizes[-1] *= size
            steps[-1] = stride
        else:
            sizes.append(size)
            steps.append(stride)
    if len(sizes) > 4:
        return None
    padding = 4 - len(sizes)
    sizes = [1] * padding + sizes
    steps = [0] * padding + steps
    return (sizes[1], sizes[2], sizes[3]), (steps[0], steps[1], steps[2], steps[3])


def _kernel_reads(t: torch.Tensor) -> bool:
    """Whether the Triton kernel can read `t` from its memory, as `t` or as its contiguous copy."""
    return (t.is_cuda and type(t) in PLAIN_TENSORS and t.dtype in _KERNEL_DTYPES and not t.is_neg()
            and t.numel() < _KERNEL_MAX_ELEMENTS)


def _kernel_input(t: torch.Tensor) -> tuple[torch.Tensor, Layout | None] | None:
    """What the Triton kernel reads for `t`, and the layout it reads it by: `t` itself where it is flat memory
    (no layout), or a strided view past STRIDED_READ_BYTES (its layout); a smaller strided view's contiguous
    copy (one copy costs the host less than the torch ops' path); or None where the kernel cannot read it. The
    kernel reads memory by address: a wrapper subclass's (a functional collective's AsyncCollectiveTensor, still
    in flight) is not its data, so such tensors go through torch's ops. `submit` asks again for `as_real(t)`, an
    integer or complex tensor's floats."""
    if not _kernel_reads(t):
        return None
    if t.is_contiguous():
        return t, None
    if t.numel() * t.element_size() > STRIDED_READ_BYTES:
        layout = strided_layout(t.shape, t.stride())
        if layout is not None:
            return t, layout
    return t.contiguous(), None


def _current_waits_for(device: int, stream: int) -> None:
    """The current stream of CUDA device `device` waits for the work queued so far on `stream` (a raw handle)."""
    torch.cuda.current_stream(device).wait_stream(torch.cuda.ExternalStream(stream, device=device))


def reduce_partials(partials: torch.Tensor) -> torch.Tensor:
    """Fingerprint statistics [rows, _STATS] from per-program partials [rows, programs, _STATS]: the
    maximum of the max column, sums of the others (in a fixed order: deterministic)."""
    p = partials
    return torch.cat([p[:, :, 0:3].sum(1), p[:, :, 3:4].amax(1), p[:, :, 4:_STATS].sum(1)], dim=1)


class DeviceFingerprints:
    """Deferred fingerprints of device tensors, fetched in batches.

    `submit(t)` returns a dict that is filled with `t`'s fingerprint once its
    batch is read; `resolved` counts the fingerprints filled so far, in
    submission order (`submitted` all of them). `poll()` fills what has
    arrived without waiting; `finish()` waits for everything.
    """

    def __init__(self, batch: int = BATCH, in_flight: int = IN_FLIGHT, programs: int = PROGRAMS) -> None:
        self.batch = batch
        self.in_flight = in_flight
        self.programs = programs
        self.submitted = 0
        self.resolved = 0
        self.fetches = 0  # batches read back: the host waits at most this often
        self._launch = _kernel_launcher()
        self._partials: torch.Tensor | None = None  # [batch, programs, _STATS] float64, zeros
        self._device: int | None = None  # the open batch's device (`get_device()`: -1 for the CPU)
        self._queues = False  # the open batch's launcher can fingerprint several tensors per launch
        self._slots: list[tuple[Fingerprint, int]] = []
        self._sealed: deque[_Sealed] = deque()
        self._queue: _Queue | None = None
        # The streams (raw handle: device) that fingerprints of the open batch were launched on.
        self._streams: dict[int, int] = {}
        self._cuda_batches = False  # a batch of CUDA fingerprints was sealed (see busy_marker)
        # (placeholder, the placeholder to fill with its statistics less the sketch once it is filled): see
        # `derive_without_sketch`.
        self._derived: deque[tuple[Fingerprint, Fingerprint]] = deque()

    @property
    def uses_triton(self) -> bool:
        return self._launch is not None

    def submit(self, t: torch.Tensor) -> Fingerprint:
        """Start `t`'s fingerprint on its device (launched now, or queued: see `flush`) on the current
        stream; the returned dict is filled when the batch is read (an empty tensor's at once)."""
        launch = self._launch
        readable = _kernel_input(t) if launch is not None else None
        if readable is None:
            # Integers and bools as their float64 copy (exact up to 2**53: the values the host reads), complex
            # tensors as their real and imaginary parts: the kernel reads those too, where twelve torch ops took
            # 80 us of host time per tensor (GPT-2's position ids).
            real = as_real(t)
            readable = _kernel_input(real) if launch is not None else None
            x, layout = readable if readable is not None else (real, None)
        else:
            x, layout = readable
        n = x.numel()
        if n == 0:
            return empty_fingerprint()
        device = x.get_device()
        if device != self._device and self._partials is not None:
            self.seal()  # one buffer per device
        if self._partials is None:
            self._device = device
            self._partials = torch.zeros((self.batch, self.programs, _STATS), dtype=torch.float64, device=x.device)
            self._queues = launch is not None and launch.takes_many(self._partials)
        slot = len(self._slots)
        stream = 0  # the raw stream handle, where the launcher is used
        if launch is not None and x.is_cuda:
            stream = launch.stream(device)
            self._streams[stream] = device
        if readable is not None:
            assert launch is not None
            nbytes = n * x.element_size()
            if layout is None and nbytes <= QUEUE_BYTES and self._queues:
                self._enqueue(x, slot, nbytes, device, stream)
            else:
                launch(x, self._partials, slot, stream, layout)
        else:
            with torch.no_grad():
                _torch_partials(x.reshape(-1), self._partials[slot])
        placeholder: Fingerprint = {}  # filled in place when the batch is read
        self._slots.append((placeholder, n))
        self.submitted += 1
        if len(self._slots) == self.batch:
            self.seal()
        return placeholder

    def derive_without_sketch(self, source: Fingerprint) -> Fingerprint:
        """A placeholder filled with `without_sketch(source)` once `source`, a placeholder submitted before, is
        filled: a transposed view's fingerprint, known without reading the view (GPT-2's attention transposes four
        tensors per layer)."""
        derived: Fingerprint = {}
        self._derived.append((source, derived))
        return derived

    def _fill_derived(self) -> None:
        # Oldest first: each one's source was submitted before it was derived, so the sources of the records
        # `resolved` releases are filled, and their copies with them.
        pending = self._derived
        while pending and pending[0][0]:
            source, derived = pending.popleft()
            derived.update(without_sketch(source))

    def submit_to_queue(self, t: torch.Tensor) -> Fingerprint | None:
        """`submit(t)` for the common case, with only the checks it needs: a plain CUDA tensor (the caller
        checks) that joins the open queue (its dtype, device and stream; not negated, not a functional wrapper or an
        efficient zero tensor, its storage not freed under it; room left) and does not fill the batch. It joins as it
        is, or a strided view up to STRIDED_READ_BYTES as its contiguous copy (eager GPT-2's split chunks and
        attention outputs: 24 per call, which took `submit` at 55-77 us each on the H100's host); a queue too full for
        it is launched first (GPT-2's 50 MB activations each fill most of one). None where `submit` must take it."""
        queue, launch = self._queue, self._launch
        if queue is None or launch is None or torch._is_functional_tensor(t) or t._is_zerotensor():
            return None
        n = t.numel()
        if n == 0:  # as `submit` has it, of any dtype or layout (GPT-2's empty cache tensors: 18 per forward)
            return empty_fingerprint()
        if t.dtype != queue.dtype or t.is_neg():
            return None
        nbytes = n * t.element_size()
        contiguous = t.is_contiguous()
        if contiguous:
            # `memory_holds(t)` for a contiguous tensor, inlined: its storage still covers its elements.
            if t.storage_offset() * t.element_size() + nbytes > t.untyped_storage().nbytes():
                return None
        elif nbytes > STRIDED_READ_BYTES or not memory_holds(t):  # read in place by a launch of its own (`submit`)
            return None
        slot = len(self._slots)
        if (nbytes > QUEUE_BYTES or slot + 1 >= self.batch or t.get_device() != queue.device
                or self._on_another_stream(queue.device, queue.stream)):
            return None
        if not contiguous:  # a small strided view joins as its contiguous copy, as `submit` queues it
            with torch._C._DisableTorchDispatch():
                t = t.contiguous()
        if queue.nbytes + nbytes > QUEUE_BYTES:  # as `_enqueue` does: launch the queue, join the empty one it leaves
            with torch._C._DisableTorchDispatch():
                self.flush()
            queue = self._queue
            assert queue is not None
        queue.tensors.append(t)
        queue.rows.append(slot)
        queue.nbytes += nbytes
        placeholder: Fingerprint = {}  # filled in place when the batch is read
        self._slots.append((placeholder, n))
        self.submitted += 1
        if len(queue.tensors) == launch.slots:
            with torch._C._DisableTorchDispatch():  # as `submit` launches: no dispatch mode sees a first compile's work
                self.flush()
        return placeholder

    def _enqueue(self, x: torch.Tensor, slot: int, nbytes: int, device: int, stream: int) -> None:
        assert self._launch is not None
        queue = self._queue
        if queue is not None and (queue.dtype != x.dtype or queue.stream != stream
                                  or queue.nbytes + nbytes > QUEUE_BYTES):
            self.flush()
            queue = None
        if queue is None:
            queue = self._queue = _Queue(device, stream, x.dtype, [], [], 0, [])
        queue.tensors.append(x)
        queue.rows.append(slot)
        queue.nbytes += nbytes
        if len(queue.tensors) == self._launch.slots:
            self.flush()

    def before_op(self, written: list[torch.Tensor]) -> None:
        """Called before each generated kernel and each of the program's ops that writes an argument (in place,
        out=), with the tensors it writes: flush the queue if one of them shares memory with a queued tensor, or
        if the op runs on another stream than the queue's (which may have waited for the queue's tensors to be
        made, and then write them). Other writes, and an op's new outputs, cannot reach a queued tensor: its
        memory stays held, so no new tensor is made there."""
        queue = self._queue
        if queue is not None and queue.tensors and (self._on_another_stream(queue.device, queue.stream)
                                                    or any(queue.overlaps(t) for t in written)):
            self.flush()

    def flush(self) -> None:
        """Launch the queued fingerprints (before anything may write their tensors), on the stream their
        tensors were made on. The current stream, where the program goes on, then waits for that launch
        if it is another stream: the program's own wait for those tensors was before it. An empty queue of the
        same dtype and stream stays open, so the next tensor can join it through `submit_to_queue`."""
        queue = self._queue
        if queue is None or not queue.tensors:
            return
        self._queue = _Queue(queue.device, queue.stream, queue.dtype, [], [], 0, [])
        assert self._launch is not None and self._partials is not None
        self._launch.many(queue.tensors, queue.rows, self._partials, queue.stream)
        if self._on_another_stream(queue.device, queue.stream):
            _current_waits_for(queue.device, queue.stream)

    def _on_another_stream(self, device: int, stream: int) -> bool:
        assert self._launch is not None
        return self._launch.stream(device) != stream

    def seal(self) -> None:
        """Reduce the open batch on the device and start copying it to the host."""
        self.flush()
        self._queue = None  # the next batch may be on another device
        if not self._slots:
            return
        assert self._partials is not None
        for stream, device in self._streams.items():  # the reduction runs on the current stream
            if self._on_another_stream(device, stream):
                _current_waits_for(device, stream)
        self._streams = {}
        with torch.no_grad():
            p = self._partials[: len(self._slots)]
            stats = reduce_partials(p)
            event = None
            if stats.is_cuda:
                host = torch.empty(stats.shape, dtype=torch.float64, pin_memory=True)
                host.copy_(stats, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                self._cuda_batches = True
            else:  # CPU tensors (tests): already there
                host = stats
        assert self._device is not None
        self._sealed.append(_Sealed(event, self._device, host, self._slots))
        self._partials, self._slots, self._device = None, [], None
        while len(self._sealed) > self.in_flight:
            self._read_oldest()

    def _read_oldest(self) -> None:
        batch = self._sealed[0]
        if batch.event is not None:
            # May run the program's host-wait hooks (record/host_waits.py), which may read batches themselves:
            # always from the front, so the order holds; this one may be read by then.
            batch.event.synchronize()
        if not self._sealed or self._sealed[0] is not batch:
            return
        self._sealed.popleft()
        fill_from_rows(batch.slots, batch.host.tolist())
        self._fill_derived()
        self.resolved += len(batch.slots)
        self.fetches += 1

    def read_sealed(self, device: int) -> bool:
        """Wait for the oldest batch on its way, where it is on `device`, and fill its fingerprints; False where
        there is no such batch."""
        if not self._sealed or self._sealed[0].device != device:
            return False
        self._read_oldest()
        return True

    def busy_marker(self) -> Any:
        """A CUDA event recorded now on the current stream (`query()` is True once the device has done the work
        queued so far), or None before any batch of CUDA fingerprints (CPU tensors: nothing to be busy with)."""
        if not self._cuda_batches:
            return None
        event = torch.cuda.Event()
        event.record()
        return event

    def poll(self) -> None:
        """Fill the fingerprints of every batch that has arrived, without waiting."""
        while self._sealed and (self._sealed[0].event is None or self._sealed[0].event.query()):
            self._read_oldest()

    def wait_for(self, count: int) -> None:
        """Wait until the first `count` fingerprints submitted are filled (sealing the open batch if it holds
        one of them)."""
        if count <= self.resolved:
            return
        if count > self.submitted - len(self._slots):
            self.seal()
        while self._sealed and self.resolved < count:
            self._read_oldest()

    def finish(self) -> None:
        """Wait for and fill every fingerprint submitted so far."""
        self.seal()
        while self._sealed:
            self._read_oldest()

    @property
    def pending(self) -> bool:
        return self.resolved < self.submitted
