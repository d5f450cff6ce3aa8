"""Tensor fingerprints: a few statistics that can be compared with a tolerance.

A fingerprint is a dict of plain numbers, computed in float64 so that the
statistics of two float32 runs differ only by what the runs computed:

  sum   sum of finite elements        (signed: catches sign and offset errors)
  l1    sum of |x| over finite ones   (scale, the denominator of relative diffs)
  l2    sqrt(sum x^2) over finite ones
  max   max |x| over finite ones      (catches a single wrong element)
  nan   number of NaN elements
  inf   number of +-Inf elements
  n     number of (real) elements; complex tensors count real and imaginary parts

plus, in exact mode, `hash`: a digest of the raw bytes, for bitwise comparison.
Fake and meta tensors have no data and get no fingerprint (None).
"""

from __future__ import annotations

import ctypes
import hashlib
import math
from typing import Any

import torch

FINGERPRINT_KINDS = ("sum", "l1", "l2", "max", "nan", "inf", "n")


def has_data(t: torch.Tensor) -> bool:
    """False for tensors whose values do not exist: meta, fake, functional wrappers."""
    if t.is_meta or t.device.type == "meta":
        return False
    # FakeTensor and other wrapper subclasses carry no storage we may read.
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(t, FakeTensor):
        return False
    return not torch._is_functional_tensor(t)


def _as_real_float64(t: torch.Tensor) -> torch.Tensor:
    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x.resolve_conj())
    if x.is_quantized:
        x = x.dequantize()
    return x.to(torch.float64).reshape(-1)


def fingerprint(t: torch.Tensor, exact: bool = False) -> dict[str, Any] | None:
    """Fingerprint of one tensor, or None when it has no data to read.

    One float64 copy, then fused reductions over it (norms take |x| without
    a temporary). NaN and Inf are only counted when the float64 sum is not
    finite: a sum of finite float32/16 values cannot overflow float64, so a
    finite sum means there are none.
    """
    if not has_data(t):
        return None
    with torch.no_grad():
        x = _as_real_float64(t)
        n = x.numel()
        if n == 0:
            fp: dict[str, Any] = {"sum": 0.0, "l1": 0.0, "l2": 0.0, "max": 0.0, "nan": 0, "inf": 0, "n": 0}
        else:
            norm = torch.linalg.vector_norm
            stats = torch.stack([x.sum(), norm(x, 1), norm(x, 2), norm(x, float("inf"))]).tolist()
            nan = inf = 0
            if not math.isfinite(stats[0]):
                nan, inf = int(torch.isnan(x).sum()), int(torch.isinf(x).sum())
                finite = x[torch.isfinite(x)]
                stats = (torch.stack([finite.sum(), norm(finite, 1), norm(finite, 2), norm(finite, float("inf"))]).tolist()
                         if finite.numel() else [0.0, 0.0, 0.0, 0.0])
            fp = {"sum": stats[0], "l1": stats[1], "l2": stats[2], "max": stats[3], "nan": nan, "inf": inf, "n": n}
        if exact:
            fp["hash"] = content_hash(t)
    return fp


def content_hash(t: torch.Tensor) -> str:
    """Digest of the logical contents (shape, dtype and values in row-major order)."""
    x = t.detach()
    if x.is_conj():
        x = x.resolve_conj()
    if x.is_neg():
        x = x.resolve_neg()
    x = x.contiguous().cpu()
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{x.dtype}{tuple(x.shape)}".encode())
    if x.numel():
        # Raw bytes of the contiguous copy, without numpy (not a dependency).
        h.update(ctypes.string_at(x.data_ptr(), x.numel() * x.element_size()))
    return h.hexdigest()
