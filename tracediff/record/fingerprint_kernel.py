"""One Triton kernel for a device fingerprint: a single read of the tensor.

Each program strides over the flat tensor and keeps per-lane float64
accumulators of the finite elements (sum, |x|, x^2, max |x|) and counts of
NaN and Inf, then writes its six partial statistics to its row of `out`
([programs, 6] float64). record/device_fingerprints.py reduces the rows of a
whole batch at once. Importing this module raises ImportError without Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 1024


@triton.jit
def _partial_stats(x_ptr, n, step, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], dtype=tl.float64)
    l1 = tl.zeros([BLOCK], dtype=tl.float64)
    squares = tl.zeros([BLOCK], dtype=tl.float64)
    largest = tl.zeros([BLOCK], dtype=tl.float64)
    nans = tl.zeros([BLOCK], dtype=tl.float64)
    infs = tl.zeros([BLOCK], dtype=tl.float64)
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
    row = out_ptr + tl.program_id(0) * 6
    tl.store(row + 0, tl.sum(total, 0))
    tl.store(row + 1, tl.sum(l1, 0))
    tl.store(row + 2, tl.sum(squares, 0))
    tl.store(row + 3, tl.max(largest, 0))
    tl.store(row + 4, tl.sum(nans, 0))
    tl.store(row + 5, tl.sum(infs, 0))


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    """Partial statistics of flat contiguous float32/float64 `x` into `out` [programs, 6] (zeros)."""
    n = x.numel()
    programs = min(out.shape[0], triton.cdiv(n, _BLOCK))
    _partial_stats[(programs,)](x, n, programs * _BLOCK, out, BLOCK=_BLOCK, num_warps=4)
