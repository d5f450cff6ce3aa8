"""One Triton kernel for a device fingerprint: a single read of the tensor.

The flat tensor is read as rows of the sketch's period (record/fingerprint.py):
each program owns a block of columns over a range of rows and keeps per-lane
float64 accumulators of the finite elements (sum, |x|, x^2, max |x|) and
counts of NaN and Inf; a lane's column fixes its sketch signs, so the sketch's
signed sums are taken once from the lanes' sums at the end (the fold that
fingerprint.sketch does on the host). It writes its partial statistics to its row of
the batch buffer `out` ([batch, programs, 6 + SKETCH_WIDTH] float64, row
`row`; a small tensor leaves the rest of its row zero).
record/device_fingerprints.py reduces the rows of a whole batch at once.
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

from tracediff.record.fingerprint import SKETCH_PERIOD, SKETCH_WIDTH

# Lanes per program. The flat tensor is read as rows of SKETCH_PERIOD elements (the sketch's signs repeat
# with that period): a program owns BLOCK columns of a range of rows, so each lane always sees the same
# position modulo the period and keeps one sum for the sketch, signed once at the end, instead of
# SKETCH_WIDTH signed sums per element.
BLOCK = 256
WARPS = 4
STATS = 6 + SKETCH_WIDTH


@triton.jit(do_not_specialize=["rows_per_program", "first"])
def _partial_stats(x_ptr, n, rows_per_program, out_ptr, first, BLOCK: tl.constexpr, PERIOD: tl.constexpr,
                   COLUMN_BLOCKS: tl.constexpr, WIDTH: tl.constexpr, STATS: tl.constexpr):
    program = tl.program_id(0)
    columns = (program % COLUMN_BLOCKS) * BLOCK + tl.arange(0, BLOCK)
    in_period = columns < PERIOD
    first_row = (program // COLUMN_BLOCKS) * rows_per_program
    total = tl.zeros([BLOCK], dtype=tl.float64)
    l1 = tl.zeros([BLOCK], dtype=tl.float64)
    squares = tl.zeros([BLOCK], dtype=tl.float64)
    largest = tl.zeros([BLOCK], dtype=tl.float64)
    nans = tl.zeros([BLOCK], dtype=tl.float64)
    infs = tl.zeros([BLOCK], dtype=tl.float64)
    for row in range(first_row, first_row + rows_per_program):
        index = row.to(tl.int64) * PERIOD + columns  # type: ignore[attr-defined]  # row: a Triton scalar
        raw = tl.load(x_ptr + index, mask=in_period & (index < n), other=0.0).to(tl.float64)
        is_nan = raw != raw
        nonfinite = raw * 0.0 != 0.0  # NaN or +-Inf
        is_inf = nonfinite & (raw == raw)
        v = tl.where(nonfinite, 0.0, raw)
        a = tl.abs(v)
        total += v
        l1 += a
        squares += a * a
        largest = tl.maximum(largest, a)
        nans += is_nan.to(tl.float64)
        infs += is_inf.to(tl.float64)
    # The sketch's signs: bit j of a hash of the position modulo PERIOD (fingerprint.sketch_signs), the
    # lane's column.
    h = (columns.to(tl.int64) * 2654435761) & 0xFFFFFFFF
    h = h ^ (h >> 16)
    bits = tl.arange(0, WIDTH).to(tl.int64)
    positive = ((h[:, None] >> bits[None, :]) & 1) != 0
    sk = tl.where(positive, total[:, None], -total[:, None])
    base = out_ptr + (first + program) * STATS
    tl.store(base + 0, tl.sum(total, 0))
    tl.store(base + 1, tl.sum(l1, 0))
    tl.store(base + 2, tl.sum(squares, 0))
    tl.store(base + 3, tl.max(largest, 0))
    tl.store(base + 4, tl.sum(nans, 0))
    tl.store(base + 5, tl.sum(infs, 0))
    tl.store(base + 6 + tl.arange(0, WIDTH), tl.sum(sk, 0))


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


class Launcher:
    """Launches `_partial_stats`; compiled kernels kept per specialization (dtype, alignment, n)."""

    def __init__(self, block: int = BLOCK, warps: int = WARPS) -> None:
        self.block = block
        self.warps = warps
        self.column_blocks = triton.cdiv(SKETCH_PERIOD, block)
        self._compiled: dict[tuple[Any, ...], Any] = {}
        self._direct = True  # False once a direct launch failed: Triton changed, use its JIT path
        self._current_stream: Any = None  # Triton's driver's get_current_stream, looked up once
        self._until_hook_check = 0
        self._hooked = False

    def __call__(self, x: torch.Tensor, out: torch.Tensor, row: int) -> None:
        """Partial statistics of flat contiguous floating-point `x` (float32, float64, bfloat16, float16) into `out[row]`
        ([batch, programs, STATS], zeros)."""
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
        # What Triton specializes a compiled kernel on: pointer alignment, n's divisibility and n == 1.
        key = (x.dtype, x.data_ptr() % 16 == 0, n % 16 == 0, n == 1, block)
        kernel = self._compiled.get(key) if self._direct else None
        if kernel is not None and not self._hooks_active():
            try:
                if self._current_stream is None:
                    self._current_stream = triton.runtime.driver.active.get_current_stream
                kernel.run(programs, 1, 1, self._current_stream(x.get_device()), kernel.function,
                           kernel.packed_metadata, None, None, None,
                           x, n, rows_per_program, out, first, block, SKETCH_PERIOD, column_blocks,
                           SKETCH_WIDTH, STATS)
                return
            except Exception:  # noqa: BLE001 - another Triton's launcher signature: take the JIT path
                self._direct = False
        kernel = _partial_stats[(programs,)](x, n, rows_per_program, out, first, BLOCK=block,
                                             PERIOD=SKETCH_PERIOD, COLUMN_BLOCKS=column_blocks, WIDTH=SKETCH_WIDTH,
                                             STATS=STATS, num_warps=self.warps)
        if hasattr(kernel, "result"):  # Triton's asynchronous compile mode
            kernel = kernel.result()
        self._compiled[key] = kernel

    def _hooks_active(self) -> bool:
        """`_launch_hooks_active()`, looked at again every _HOOK_CHECK_EVERY launches."""
        if self._until_hook_check <= 0:
            self._hooked = _launch_hooks_active()
            self._until_hook_check = _HOOK_CHECK_EVERY
        self._until_hook_check -= 1
        return self._hooked
