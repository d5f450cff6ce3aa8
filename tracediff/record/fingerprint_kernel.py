"""One Triton kernel for a device fingerprint: a single read of the tensor.

Each program strides over the flat tensor and keeps per-lane float64
accumulators of the finite elements (sum, |x|, x^2, max |x|) and counts of
NaN and Inf, and the signed sums of the sketch (record/fingerprint.py, one
column per sign pattern), then writes its partial statistics to its row of
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

# Lanes per program: the sketch keeps SKETCH_WIDTH float64 accumulators per lane, so a block of 256
# over 4 warps holds 32 of them per thread, in registers.
BLOCK = 256
WARPS = 4
STATS = 6 + SKETCH_WIDTH


@triton.jit(do_not_specialize=["step", "first"])
def _partial_stats(x_ptr, n, step, out_ptr, first, BLOCK: tl.constexpr, PERIOD: tl.constexpr,
                   WIDTH: tl.constexpr, STATS: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    bits = tl.arange(0, WIDTH).to(tl.int64)
    total = tl.zeros([BLOCK], dtype=tl.float64)
    l1 = tl.zeros([BLOCK], dtype=tl.float64)
    squares = tl.zeros([BLOCK], dtype=tl.float64)
    largest = tl.zeros([BLOCK], dtype=tl.float64)
    nans = tl.zeros([BLOCK], dtype=tl.float64)
    infs = tl.zeros([BLOCK], dtype=tl.float64)
    sk = tl.zeros([BLOCK, WIDTH], dtype=tl.float64)
    for start in range(0, n, step):
        index = start + offsets
        raw = tl.load(x_ptr + index, mask=index < n, other=0.0).to(tl.float64)
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
        # The sketch's signs: bit j of a hash of the position modulo PERIOD (fingerprint.sketch_signs).
        h = ((index % PERIOD).to(tl.int64) * 2654435761) & 0xFFFFFFFF
        h = h ^ (h >> 16)
        positive = ((h[:, None] >> bits[None, :]) & 1) != 0
        sk += tl.where(positive, v[:, None], -v[:, None])
    base = out_ptr + (first + tl.program_id(0)) * STATS
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


class Launcher:
    """Launches `_partial_stats`; compiled kernels kept per specialization (dtype, alignment, n)."""

    def __init__(self, block: int = BLOCK, warps: int = WARPS) -> None:
        self.block = block
        self.warps = warps
        self._compiled: dict[tuple[Any, ...], Any] = {}
        self._direct = True  # False once a direct launch failed: Triton changed, use its JIT path

    def __call__(self, x: torch.Tensor, out: torch.Tensor, row: int) -> None:
        """Partial statistics of flat contiguous float32/float64 `x` into `out[row]`
        ([batch, programs, STATS], zeros)."""
        n = x.numel()
        programs = min(out.shape[1], triton.cdiv(n, self.block))  # rows left out stay zero
        step = programs * self.block
        first = row * out.shape[1]  # index of the row's first partial in the buffer
        # What Triton specializes a compiled kernel on: pointer alignment, n's divisibility and n == 1.
        key = (x.dtype, x.data_ptr() % 16 == 0, n % 16 == 0, n == 1)
        kernel = self._compiled.get(key) if self._direct else None
        if kernel is not None and not _launch_hooks_active():
            try:
                stream = triton.runtime.driver.active.get_current_stream(x.device.index)
                kernel.run(programs, 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None,
                           x, n, step, out, first, self.block, SKETCH_PERIOD, SKETCH_WIDTH, STATS)
                return
            except Exception:  # noqa: BLE001 - another Triton's launcher signature: take the JIT path
                self._direct = False
        kernel = _partial_stats[(programs,)](x, n, step, out, first, BLOCK=self.block, PERIOD=SKETCH_PERIOD,
                                             WIDTH=SKETCH_WIDTH, STATS=STATS,
                                             num_warps=self.warps)
        if hasattr(kernel, "result"):  # Triton's asynchronous compile mode
            kernel = kernel.result()
        self._compiled[key] = kernel
