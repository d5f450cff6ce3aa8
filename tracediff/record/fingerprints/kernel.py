"""One Triton kernel for a device fingerprint: a single read of the tensor.

The flat tensor is read as rows of the sketch's period (record/fingerprints/fingerprint.py):
each program owns a block of columns over a range of rows and keeps per-lane
float64 accumulators of the finite elements (sum, |x|, x^2, max |x|) and
counts of NaN and Inf; a lane's column fixes its sketch signs, so the sketch's
signed sums are taken once from the lanes' sums at the end (the fold that
fingerprint.sketch does on the host). It writes its partial statistics to its row of
the batch buffer `out` ([batch, programs, 6 + SKETCH_WIDTH] float64, row
`row`; a small tensor leaves the rest of its row zero).
record/fingerprints/device.py reduces the rows of a whole batch at once.
Importing this module raises ImportError without Triton.

The recorder launches this kernel once per fingerprinted tensor, so the host
cost of a launch matters more than the kernel (which runs at about the speed
of `x.sum()`): `Launcher` compiles through Triton's JIT once per
specialization and then calls the compiled kernel directly, skipping the
JIT's per-call argument binding and cache lookup.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from tracediff.record.fingerprints.fingerprint import SKETCH_PERIOD, SKETCH_WIDTH

# A tensor's layout as the kernel reads it in place: the sizes of its last three dimensions and the strides of
# its four, in elements (device_fingerprints.strided_layout).
Layout = tuple[tuple[int, int, int], tuple[int, int, int, int]]

# Lanes per program. The flat tensor is read as rows of SKETCH_PERIOD elements (the sketch's signs repeat
# with that period): a program owns BLOCK columns of a range of rows, so each lane always sees the same
# position modulo the period and keeps one sum for the sketch, signed once at the end, instead of
# SKETCH_WIDTH signed sums per element.
BLOCK = 256
WARPS = 4
STATS = 6 + SKETCH_WIDTH
# Rows of the period each lane loads at once (see _stats_of_program's loop).
ROWS_AT_ONCE: tl.constexpr = tl.constexpr(8)


@triton.jit
def _stats_of_program(x_ptr, n, rows_per_program, program, out_ptr, first, s1, s2, s3, t0, t1, t2, t3,
                      DIMS: tl.constexpr, BLOCK: tl.constexpr, PERIOD: tl.constexpr, COLUMN_BLOCKS: tl.constexpr,
                      WIDTH: tl.constexpr, STATS: tl.constexpr):
    # Program `program`'s partial statistics of the `n` elements at `x_ptr`, into partial row `first + program`.
    # DIMS 0: flat memory. Else the elements are those of a [n / (s1 s2 s3), s1, s2, s3] tensor with strides t0..t3
    # (in elements), of which the last DIMS dimensions are more than padding, in logical order: each lane sees the
    # values a contiguous copy would give it, in the same order, so the partials are the same bits. An index's
    # divisions cost more than its load, so each DIMS does only those it needs, and two dimensions (a transpose, a
    # slice: the large views) none past the first row: a lane's next row is PERIOD elements on, a fixed step of
    # its row and column in the view.
    columns = (program % COLUMN_BLOCKS) * BLOCK + tl.arange(0, BLOCK)
    in_period = columns < PERIOD
    first_row = (program // COLUMN_BLOCKS) * rows_per_program
    total = tl.zeros([BLOCK], dtype=tl.float64)
    l1 = tl.zeros([BLOCK], dtype=tl.float64)
    squares = tl.zeros([BLOCK], dtype=tl.float64)
    # What needs no float64 is done without it (the device's float64 units are few; the sums stay in float64):
    # the NaN and Inf tests in the element's float32 (float64 for float64 tensors), the counts in integers, and
    # |x|'s maximum on its float32 bits, whose integer order is the order of the values, subnormal ones included
    # (a float32 `maximum` may flush those to zero), widened once at the end: the float64 maximum's bits.
    if x_ptr.dtype.element_ty == tl.float64:
        largest = tl.zeros([BLOCK], dtype=tl.float64)
    else:
        largest = tl.zeros([BLOCK], dtype=tl.int32)
    nans = tl.zeros([BLOCK], dtype=tl.int32)
    infs = tl.zeros([BLOCK], dtype=tl.int32)
    # DIMS 2: the lane's (row, column) in the view, advanced by (PERIOD // s3, PERIOD % s3) with a carry.
    start = (first_row * PERIOD + columns).to(tl.int32)
    view_row = start // s3
    view_column = start % s3
    last_row = first_row + rows_per_program
    # ROWS_AT_ONCE rows per turn, unrolled: their loads are independent of the sums, so they are all in flight
    # together (one row's load at a time left the device waiting on memory: about a tenth of its bandwidth in
    # GPT-2's forward). Each lane still adds its rows in order, and a row past the program's own is read as
    # 0.0, which leaves every sum, count and maximum as it was (they start at +0.0): the same bits.
    for turn in range(first_row, last_row, ROWS_AT_ONCE):
        for step in tl.static_range(ROWS_AT_ONCE):
            row = turn + step
            index = row.to(tl.int64) * PERIOD + columns
            flat = index.to(tl.int32)  # below 2**31 (_KERNEL_MAX_ELEMENTS): cheaper division
            if DIMS == 0:
                address = index
            elif DIMS == 1:
                address = index * t3
            elif DIMS == 2:
                address = view_row.to(tl.int64) * t2 + view_column.to(tl.int64) * t3
                view_column += PERIOD % s3
                carry = view_column >= s3
                view_column = tl.where(carry, view_column - s3, view_column)
                view_row += PERIOD // s3 + carry.to(tl.int32)
            elif DIMS == 3:
                rest = flat // s3
                address = ((rest // s2).to(tl.int64) * t1 + (rest % s2).to(tl.int64) * t2
                           + (flat % s3).to(tl.int64) * t3)
            else:
                rest = flat // s3
                outer = rest // s2
                address = ((outer // s1).to(tl.int64) * t0 + (outer % s1).to(tl.int64) * t1
                           + (rest % s2).to(tl.int64) * t2 + (flat % s3).to(tl.int64) * t3)
            raw = tl.load(x_ptr + address, mask=in_period & (index < n) & (row < last_row), other=0.0)
            if x_ptr.dtype.element_ty != tl.float64:
                raw = raw.to(tl.float32)
            is_nan = raw != raw
            nonfinite = raw * 0.0 != 0.0  # NaN or +-Inf
            is_inf = nonfinite & (raw == raw)
            finite = tl.where(nonfinite, 0.0, raw)
            if x_ptr.dtype.element_ty == tl.float64:
                largest = tl.maximum(largest, tl.abs(finite))
            else:
                largest = tl.maximum(largest, finite.to(tl.int32, bitcast=True) & 0x7FFFFFFF)
            v = finite.to(tl.float64)
            a = tl.abs(v)
            total += v
            l1 += a
            squares += a * a
            nans += is_nan.to(tl.int32)
            infs += is_inf.to(tl.int32)
    # The sketch's signs: bit j of a hash of the position modulo PERIOD (fingerprint.sketch_signs), the
    # lane's column.
    h = (columns.to(tl.int64) * 2654435761) & 0xFFFFFFFF
    h = h ^ (h >> 16)
    bits = tl.arange(0, WIDTH).to(tl.int64)
    positive = ((h[:, None] >> bits[None, :]) & 1) != 0
    sk = tl.where(positive, total[:, None], -total[:, None])
    base = out_ptr + (first + program).to(tl.int64) * STATS
    tl.store(base + 0, tl.sum(total, 0))
    tl.store(base + 1, tl.sum(l1, 0))
    tl.store(base + 2, tl.sum(squares, 0))
    if x_ptr.dtype.element_ty == tl.float64:
        tl.store(base + 3, tl.max(largest, 0))
    else:
        tl.store(base + 3, tl.max(largest, 0).to(tl.float32, bitcast=True).to(tl.float64))
    tl.store(base + 4, tl.sum(nans, 0).to(tl.float64))
    tl.store(base + 5, tl.sum(infs, 0).to(tl.float64))
    tl.store(base + 6 + tl.arange(0, WIDTH), tl.sum(sk, 0))


@triton.jit(do_not_specialize=["rows_per_program", "first", "s1", "s2", "s3", "t0", "t1", "t2", "t3"])
def _partial_stats(x_ptr, n, rows_per_program, out_ptr, first, s1, s2, s3, t0, t1, t2, t3, DIMS: tl.constexpr,
                   BLOCK: tl.constexpr, PERIOD: tl.constexpr, COLUMN_BLOCKS: tl.constexpr, WIDTH: tl.constexpr,
                   STATS: tl.constexpr):
    _stats_of_program(x_ptr, n, rows_per_program, tl.program_id(0), out_ptr, first, s1, s2, s3, t0, t1, t2, t3,
                      DIMS, BLOCK, PERIOD, COLUMN_BLOCKS, WIDTH, STATS)


@triton.jit
def _pick(slot, v0, v1, v2, v3, v4, v5, v6, v7):
    # The `slot`th of eight scalars: a kernel's arguments cannot be indexed.
    v = tl.where(slot == 1, v1, v0)
    v = tl.where(slot == 2, v2, v)
    v = tl.where(slot == 3, v3, v)
    v = tl.where(slot == 4, v4, v)
    v = tl.where(slot == 5, v5, v)
    v = tl.where(slot == 6, v6, v)
    return tl.where(slot == 7, v7, v)


# Tensors one `_partial_stats_many` launch fingerprints (its argument list is written out for eight).
SLOTS = 8


@triton.jit(do_not_specialize=["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "n0", "n1", "n2", "n3", "n4", "n5",
                               "n6", "n7", "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"])
def _partial_stats_many(out_ptr, a0, a1, a2, a3, a4, a5, a6, a7, n0, n1, n2, n3, n4, n5, n6, n7,
                        r0, r1, r2, r3, r4, r5, r6, r7, DTYPE: tl.constexpr, ROW_CAPACITY: tl.constexpr,
                        BLOCK: tl.constexpr, PERIOD: tl.constexpr, COLUMN_BLOCKS: tl.constexpr,
                        WIDTH: tl.constexpr, STATS: tl.constexpr):
    # `_partial_stats` of up to eight tensors of one dtype (grid axis 1), given by address (`a`), element
    # count (`n`) and batch row (`r`). Each is split into programs as `Launcher.__call__` splits it, so its
    # partials, and its fingerprint, are the same bits. Programs past a tensor's own count read nothing and
    # write zeros to partial rows that are zero anyway.
    slot = tl.program_id(1)
    n = _pick(slot, n0, n1, n2, n3, n4, n5, n6, n7)
    address = _pick(slot, a0, a1, a2, a3, a4, a5, a6, a7)
    x_ptr = address.to(tl.pointer_type(DTYPE))
    rows = (n + PERIOD - 1) // PERIOD
    groups = tl.minimum(rows, ROW_CAPACITY // COLUMN_BLOCKS)
    rows_per_program = (rows + groups - 1) // groups
    first = _pick(slot, r0, r1, r2, r3, r4, r5, r6, r7) * ROW_CAPACITY
    _stats_of_program(x_ptr, n, rows_per_program, tl.program_id(0), out_ptr, first, 1, 1, 1, 0, 0, 0, 0, 0, BLOCK,
                      PERIOD, COLUMN_BLOCKS, WIDTH, STATS)


def _launch_hooks_active() -> bool:
    """Whether a profiler hooked Triton's launches (then launch through the JIT, which feeds them).
    Triton 3.4+ keeps the hooks in (empty) HookChains; older versions in None-or-callable attributes."""
    runtime = triton.knobs.runtime
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


# Launches between two looks at Triton's launch hooks (reading its knobs costs more than a launch's checks).
_HOOK_CHECK_EVERY = 256
# Triton's dtypes for the torch dtypes the kernels read.
_TRITON_DTYPES = {torch.float32: tl.float32, torch.float64: tl.float64, torch.bfloat16: tl.bfloat16,
                  torch.float16: tl.float16}


class _DirectLaunches:
    """Launches of one JIT kernel: the first per specialization key through Triton's JIT (which compiles
    it), later ones by calling the compiled kernel directly. The JIT is taken again while a profiler hooks
    Triton's launches, and for good once a direct launch fails (another Triton's launcher signature).
    `args` are the kernel's runtime arguments, then `constants` its trailing constexpr parameters in order."""

    def __init__(self, jit: Any, warps: int) -> None:
        self.jit = jit
        self.warps = warps
        self._compiled: dict[tuple[Any, ...], tuple[Any, tuple[Any, ...]]] = {}  # key -> (kernel, constants' values)
        self._direct = True
        self._until_hook_check = 0
        self._hooked = False

    def __call__(self, key: tuple[Any, ...], grid: tuple[int, int], stream: int, args: tuple[Any, ...],
                 constants: tuple[tuple[str, Any], ...]) -> None:
        compiled = self._compiled.get(key) if self._direct else None
        if compiled is not None and not self._hooks_active():
            kernel, values = compiled
            try:
                kernel.run(grid[0], grid[1], 1, stream, kernel.function, kernel.packed_metadata, None, None, None,
                           *args, *values)
                return
            except Exception:  # noqa: BLE001 - another Triton's launcher signature: take the JIT path
                self._direct = False
        if stream != _current_stream(torch.cuda.current_device()):  # the JIT launches on the current stream
            with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
                kernel = self.jit[grid](*args, **dict(constants), num_warps=self.warps)
        else:
            kernel = self.jit[grid](*args, **dict(constants), num_warps=self.warps)
        if hasattr(kernel, "result"):  # Triton's asynchronous compile mode
            kernel = kernel.result()
        self._compiled[key] = (kernel, tuple(value for _, value in constants))

    def _hooks_active(self) -> bool:
        """`_launch_hooks_active()`, looked at again every _HOOK_CHECK_EVERY launches."""
        if self._until_hook_check <= 0:
            self._hooked = _launch_hooks_active()
            self._until_hook_check = _HOOK_CHECK_EVERY
        self._until_hook_check -= 1
        return self._hooked


def _current_stream(device: int) -> int:
    """The raw handle of the device's current CUDA stream (what Triton launches on)."""
    return triton.runtime.driver.active.get_current_stream(device)


class Launcher:
    """Launches the fingerprint kernels: `__call__` one tensor, `many` up to SLOTS tensors of one dtype."""

    slots = SLOTS

    def __init__(self, block: int = BLOCK, warps: int = WARPS) -> None:
        self.block = block
        self.column_blocks = triton.cdiv(SKETCH_PERIOD, block)
        self._one = _DirectLaunches(_partial_stats, warps)
        self._many = _DirectLaunches(_partial_stats_many, warps)
        self._get_stream: Any = None  # Triton's driver's get_current_stream, looked up once
        # `many`'s constexpr arguments by (dtype, partial rows per fingerprint), built once.
        self._many_constants: dict[tuple[torch.dtype, int], tuple[tuple[str, Any], ...]] = {}

    def stream(self, device: int) -> int:
        """The raw handle of the current stream on CUDA device `device`."""
        if self._get_stream is None:
            self._get_stream = triton.runtime.driver.active.get_current_stream
        return self._get_stream(device)

    def __call__(self, x: torch.Tensor, out: torch.Tensor, row: int, stream: int | None = None,
                 layout: Layout | None = None) -> None:
        """Partial statistics of floating-point `x` (float32, float64, bfloat16, float16) into `out[row]`
        ([batch, programs, STATS], zeros), on `stream` (a raw handle; default: the current stream). `x` is flat
        contiguous memory, or, given its `layout` (device_fingerprints.strided_layout), any tensor of that
        layout, read in place in logical order: the same partials as its contiguous copy."""
        n = x.numel()
        rows = -(-n // SKETCH_PERIOD)
        row_capacity = out.shape[1]
        block, column_blocks = self.block, self.column_blocks
        if row_capacity < column_blocks:  # fewer partials than a period's column blocks: wider blocks
            block = triton.next_power_of_2(-(-SKETCH_PERIOD // row_capacity))
            column_blocks = -(-SKETCH_PERIOD // block)
        row_groups = min(rows, max(1, row_capacity // column_blocks))
        rows_per_program = -(-rows // row_groups)
        programs = column_blocks * -(-rows // rows_per_program)  # rows of `out` left out stay zero
        first = row * row_capacity  # index of the row's first partial in the buffer
        sizes, strides = layout if layout is not None else ((1, 1, 1), (0, 0, 0, 0))
        # Dimensions that are not padding: the stored sizes of 2 or more (strided_layout drops sizes of 1), and an
        # outermost one beyond them.
        dims = 0 if layout is None else sum(size > 1 for size in sizes) + (n > sizes[0] * sizes[1] * sizes[2])
        # What Triton specializes a compiled kernel on: pointer alignment, n's divisibility and n == 1, and the
        # strides' integer width (an argument past int32 is passed as int64).
        key = (x.dtype, x.data_ptr() % 16 == 0, n % 16 == 0, n == 1, block, dims, max(strides) >= 2**31)
        if stream is None:
            stream = self.stream(x.get_device())
        self._one(key, (programs, 1), stream, (x, n, rows_per_program, out, first, *sizes, *strides),
                  (("DIMS", dims), ("BLOCK", block), ("PERIOD", SKETCH_PERIOD),
                   ("COLUMN_BLOCKS", column_blocks), ("WIDTH", SKETCH_WIDTH), ("STATS", STATS)))

    def takes_many(self, out: torch.Tensor) -> bool:
        """Whether `many` can write into `out`: it splits tensors with the default block only."""
        return out.shape[1] >= self.column_blocks

    def many(self, xs: list[torch.Tensor], rows: list[int], out: torch.Tensor, stream: int) -> None:
        """`self(x, out, row)` for each of up to SLOTS flat contiguous tensors of one dtype, in one launch on
        `stream`: the same partials, bit for bit."""
        count = len(xs)
        assert 0 < count <= SLOTS and self.takes_many(out)
        padding = SLOTS - count
        addresses = [x.data_ptr() for x in xs] + [out.data_ptr()] * padding  # unread: grid axis 1 is `count`
        sizes = [x.numel() for x in xs]
        row_capacity = out.shape[1]
        most_rows = -(-max(sizes) // SKETCH_PERIOD)
        programs = self.column_blocks * min(most_rows, row_capacity // self.column_blocks)
        key = (xs[0].dtype, row_capacity)
        constants = self._many_constants.get(key)
        if constants is None:
            constants = self._many_constants[key] = (
                ("DTYPE", _TRITON_DTYPES[xs[0].dtype]), ("ROW_CAPACITY", row_capacity), ("BLOCK", self.block),
                ("PERIOD", SKETCH_PERIOD), ("COLUMN_BLOCKS", self.column_blocks), ("WIDTH", SKETCH_WIDTH),
                ("STATS", STATS))
        self._many(key, (programs, count), stream, (out, *addresses, *sizes, *([0] * padding), *rows, *([0] * padding)),
                   constants)
