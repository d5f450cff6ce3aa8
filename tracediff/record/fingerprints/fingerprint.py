"""Tensor fingerprints: a few statistics that can be compared with a tolerance.

A fingerprint is a dict of plain numbers. Tensors of more than one sketch
period (4099 elements) are reduced in their accumulation dtype: float32 for
float32 and narrower (torch's pairwise sums for l1 and l2; the sum and the
sketch from a float32 fold into 4099 column sums, summed on in float64: errors
of a few float32 ulps of `l1` and `l2`, far below any float32 tolerance),
float64 for float64, integer and bool tensors; smaller tensors in float64.
NaN/Inf tensors are re-read in float64 (schema 2; schema 1 made a float64 copy
of every tensor, four times the memory traffic). On CPU the same statistics come
from one pass in C (record/fingerprints/host_stats.py: float32 past one period in short float32
sums that join double ones, as here; the rest in double), strided views read in
place, where a C compiler can build it; these torch ops are its fallback:

  sum   sum of finite elements        (signed: catches sign and offset errors)
  l1    sum of |x| over finite ones   (scale, the denominator of relative diffs)
  l2    sqrt(sum x^2) over finite ones
  max   max |x| over finite ones      (catches a single wrong element)
  nan   number of NaN elements
  inf   number of +-Inf elements
  n     number of (real) elements; complex tensors count real and imaginary parts
  sk    sixteen signed sums over the finite elements, sum_i s_j(i) x_i with fixed pseudo-random
        signs s_j(i) = +-1 of the element's position (row-major): a sketch of the values.
        For two tensors, the root mean square of the sketches' differences estimates the
        L2 distance ||a - b|| (each signed sum's difference has that expected square), so
        a difference scattered over many elements with mixed signs, which moves sum, l1,
        l2 and max only at second order, is still seen at first order. Float64 sums.
        Sixteen since 2026-11, four before: on the differences that planted faults made
        in the localization benchmark's results, four sums put the estimate under 0.7 times
        the true distance one time in five (0.45 times one in twenty), a planted fault 1.6
        times beyond the tolerance passing as within it; sixteen, one in twenty. The first
        four are the same signs as before: traces of either width compare on those.

plus, in exact mode, `hash`: a digest of the raw bytes, for bitwise comparison.
Fake and meta tensors have no data and get no fingerprint (None). Efficient
zero tensors (`torch._efficientzerotensor`, made by forward-mode AD and
torch.func) have no memory either, but their value is known: all zeros.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
from collections.abc import Iterable

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor

from tracediff.record.fingerprints import host_stats
from tracediff.record.fingerprints.host_stats import PLAIN_TENSORS, HostStats, memory_holds
from tracediff.trace.schema import Fingerprint

FINGERPRINT_KINDS = ("sum", "l1", "l2", "max", "nan", "inf", "n", "sk")
# The sketch's signs repeat with this (prime) period: one table of signs serves every size, and
# a tensor is folded into a vector of this length by one float64 reduction before the signed sums.
SKETCH_PERIOD = 4099
SKETCH_WIDTH = 16


@functools.lru_cache(maxsize=8)
def sketch_signs(device: str = "cpu") -> torch.Tensor:
    """[SKETCH_PERIOD, SKETCH_WIDTH] float64 of +-1: bit j of a multiplicative hash of the position.
    The same function of the position on every device (record/fingerprints/kernel.py computes it too).
    Computed on `device` itself: a copy from the host would be a synchronizing call on CUDA, made at the
    first fingerprint, wherever the program is."""
    r = torch.arange(SKETCH_PERIOD, dtype=torch.int64, device=device)
    h = (r * 2654435761) % 2**32
    h = h ^ (h >> 16)
    bits = (h.unsqueeze(1) >> torch.arange(SKETCH_WIDTH, device=device)) & 1
    return (bits * 2 - 1).to(torch.float64)


def sketch_masks() -> torch.Tensor:
    """[SKETCH_PERIOD] int32: the sketch's signs of each position as bits (bit j set where sign j is +1), for
    record/fingerprints/host_stats.c."""
    positive = (sketch_signs() > 0).to(torch.int32)
    return (positive << torch.arange(SKETCH_WIDTH, dtype=torch.int32)).sum(1, dtype=torch.int32)


def sketch(x: torch.Tensor) -> torch.Tensor:
    """The signed sums of flat, finite `x` (float64, [SKETCH_WIDTH]), on x's device, unread."""
    return sum_and_sketch(x)[1:]


# Rows of SKETCH_PERIOD elements summed in the tensor's own dtype at a time: float32 column sums of up to
# this many rows err by a few ulps, and reading float32 costs half of reading it as float64.
_FOLD_ROWS = 1024


def fold(x: torch.Tensor) -> torch.Tensor:
    """Flat `x` (more than one period of elements) folded to SKETCH_PERIOD column sums in its own dtype
    (element i adds to column i mod the period); past _FOLD_ROWS rows, blocks of rows summed in float64."""
    n = x.numel()
    rows, tail = divmod(n, SKETCH_PERIOD)
    matrix = x[: rows * SKETCH_PERIOD].view(rows, SKETCH_PERIOD)
    blocks = rows // _FOLD_ROWS
    if blocks > 1:
        folded = matrix[: blocks * _FOLD_ROWS].view(blocks, _FOLD_ROWS, SKETCH_PERIOD).sum(1).sum(0, dtype=torch.float64)
        folded += matrix[blocks * _FOLD_ROWS:].sum(0, dtype=torch.float64)
    else:
        folded = matrix.sum(0)
    if tail:
        folded[:tail] += x[rows * SKETCH_PERIOD:]
    return folded


def sum_and_sketch(x: torch.Tensor) -> torch.Tensor:
    """[sum, *signed sums] of flat, finite `x` (float64, [1 + SKETCH_WIDTH]), on x's device, unread: one
    float64 product of a row of ones and the sketch's signs with its fold (or `x` itself, at most one period
    long)."""
    folded = fold(x) if x.numel() > SKETCH_PERIOD else x
    weights = _sum_and_sketch_weights(str(x.device))
    if folded.numel() < SKETCH_PERIOD:
        weights = weights[:, : folded.numel()]
    return torch.mv(weights, folded.to(torch.float64))


def has_data(t: torch.Tensor) -> bool:
    """False for tensors whose values do not exist: meta, fake, functional wrappers, and plain tensors whose
    storage was freed under them (`host_stats.memory_holds`)."""
    if type(t) in PLAIN_TENSORS:  # the common case, checked per fingerprint: neither fake nor another subclass
        return not t.is_meta and not torch._is_functional_tensor(t) and memory_holds(t)
    if t.is_meta or t.device.type == "meta":
        return False
    # FakeTensor and other wrapper subclasses carry no storage we may read. A FunctionalTensor (AOT autograd's
    # tracing, where the recorder's mode may still see ops) wraps a functional, usually fake, tensor: an op on it
    # is traced into the graph, and a scratch buffer it touched would become one of the graph's constants.
    if isinstance(t, (FakeTensor, FunctionalTensor)):
        return False
    return not torch._is_functional_tensor(t)


def as_real(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The tensor's real elements (complex as real and imaginary parts) in `dtype`
    (default: its accumulation dtype, see `accumulation_dtype`), flat; no copy
    when it already is that dtype and contiguous."""
    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x.resolve_conj())
    if x.is_quantized:
        x = x.dequantize()
    # Logical (row-major) order: a transposed view sums in the same order as its
    # contiguous copy, so layout alone never changes a statistic's last bits.
    return x.to(dtype or accumulation_dtype(x.dtype)).reshape(-1)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float32 and narrower floats; float64 for float64, integers and bools.

    torch's float32 reductions sum pairwise (cascade on CPU, trees on CUDA), so
    their error is a few float32 ulps of `l1`, far inside any tolerance a
    float32 comparison can use (rtol 1e-4), and they need no float64 copy of
    the tensor. Integers go to float64, which holds them exactly up to 2**53.
    """
    if dtype.is_floating_point and dtype != torch.float64:
        return torch.float32
    return torch.float64


def from_stats(stats: list[float], n: int) -> Fingerprint:
    """A fingerprint from [sum, l1, sum of squares, max, nan, inf, *sketch] over the finite elements."""
    sketch_sums = stats[6:] if len(stats) == 6 + SKETCH_WIDTH else None
    return _fingerprint_of(float(stats[0]), float(stats[1]), stats[2], float(stats[3]), int(stats[4]), int(stats[5]),
                           n, sketch_sums)


def fill_from_rows(slots: Iterable[tuple[Fingerprint, int]], rows: Iterable[list[float]]) -> None:
    """`placeholder.update(from_stats(row, n))` for each (placeholder, n) and row of [sum, l1, sum of squares, max,
    nan, inf, *sketch] (a batch of device fingerprints, 512 rows at a time): the same dicts, keys in the same order,
    written in place without a dict per row in between (3-6 us a row on the H100's host, about 40% less here)."""
    sqrt = math.sqrt
    for (fp, n), row in zip(slots, rows):
        fp["sum"] = row[0]
        fp["l1"] = row[1]
        fp["l2"] = sqrt(row[2])
        fp["max"] = row[3]
        fp["nan"] = int(row[4])
        fp["inf"] = int(row[5])
        fp["n"] = n
        fp["sk"] = row[6:]


def _fingerprint_of(s: float, l1: float, sq: float, mx: float, nan: int, inf: int, n: int,
                    sketch_sums: list[float] | None) -> Fingerprint:
    """The fingerprint dict of its statistics (the sum of squares as its root, `l2`); `sketch_sums` (floats, as
    `tolist` and ctypes give them) kept as the list it is, not converted sum by sum."""
    fp: Fingerprint = {"sum": s, "l1": l1, "l2": math.sqrt(sq), "max": mx, "nan": nan, "inf": inf, "n": n}
    if sketch_sums is not None:
        fp["sk"] = sketch_sums
    return fp


def empty_fingerprint() -> Fingerprint:
    return {"sum": 0.0, "l1": 0.0, "l2": 0.0, "max": 0.0, "nan": 0, "inf": 0, "n": 0, "sk": [0.0] * SKETCH_WIDTH}


def is_zero_tensor(t: torch.Tensor) -> bool:
    """An efficient zero tensor: all zeros, with no memory behind it.

    Under a dispatch mode its ZeroTensor dispatch key is already handled, so
    an op on it would read its null data pointer (a segfault, not an error).
    """
    return t._is_zerotensor()


def zero_fingerprint(t: torch.Tensor) -> Fingerprint:
    """The fingerprint of `t`'s value if it were all zeros, computed without reading it."""
    fp = empty_fingerprint()
    fp["n"] = t.numel() * (2 if t.is_complex() else 1)
    return fp


class Scratch:
    """Host buffers the fingerprints of one recording reuse for their temporaries (a strided tensor's
    contiguous copy, |x|): a fresh one per tensor costs a page fault per 4 KiB page each time the
    allocator has returned the last one to the system (a 2 MiB activation: about 330 faults, more than
    the statistics themselves). Each slot grows to the largest tensor fingerprinted, up to `limit_bytes`;
    past that a temporary is allocated as before."""

    COPY, ABS = 0, 1  # the slots

    def __init__(self, limit_bytes: int = 64 << 20) -> None:
        self.limit_bytes = limit_bytes
        self._buffers: list[torch.Tensor | None] = [None, None]
        # Per slot, the last view handed out, by (elements, dtype): the next tensor of that size takes it again,
        # without the slice and the view, two torch calls (about 2 us of a 120 us fingerprint).
        self._views: list[tuple[int, torch.dtype, torch.Tensor] | None] = [None, None]

    def take(self, n: int, dtype: torch.dtype, slot: int) -> torch.Tensor:
        """An uninitialized flat CPU tensor of `n` elements of `dtype`, valid until the slot's next `take`."""
        nbytes = n * dtype.itemsize
        if nbytes > self.limit_bytes:
            return torch.empty(n, dtype=dtype)
        last = self._views[slot]
        if last is not None and last[0] == n and last[1] == dtype:
            return last[2]
        buffer = self._buffers[slot]
        if buffer is None or buffer.numel() < nbytes:
            buffer = self._buffers[slot] = torch.empty(nbytes, dtype=torch.uint8)
        view = buffer[:nbytes].view(dtype)
        self._views[slot] = (n, dtype, view)
        return view

    def flat_real(self, t: torch.Tensor) -> torch.Tensor:
        """`as_real(t)`: `t` itself where it is flat-readable already, else its logical-order copy in the
        accumulation dtype made in the COPY slot (complex and quantized tensors: as `as_real` makes it)."""
        x = t.detach()
        dtype = accumulation_dtype(x.dtype)
        if x.is_complex() or x.is_quantized or x.is_cuda or type(x) not in PLAIN_TENSORS:
            return as_real(x)  # a subclass's ops may be traced or redirected: none of them touches the buffers
        if x.dtype == dtype and x.is_contiguous():
            return x.view(-1)  # what `as_real` returns here, without its checks
        copy = self.take(x.numel(), dtype, self.COPY)
        copy.view(x.shape).copy_(x)
        return copy


def fingerprint(t: torch.Tensor, exact: bool = False, scratch: Scratch | None = None) -> Fingerprint | None:
    """Fingerprint of one tensor, read on the host, or None when it has no data to read.

    Fast path: a CPU tensor's statistics in one pass of the compiled C function (strided views read in place,
    other dtypes from their float32 or float64 copy); else by torch ops in the accumulation dtype, |x| once, then sum,
    sum of |x|, max and (squared in place) sum of squares, fetched together by one `.tolist()`. A non-finite
    result means NaN/Inf elements (or overflow): then the statistics are taken again in float64 over the finite
    elements, with the counts.
    """
    if not exact and (fp := fingerprint_in_place(t)) is not None:
        return fp
    if not has_data(t):
        return None
    if is_zero_tensor(t):
        fp = zero_fingerprint(t)
        if exact:
            fp["hash"] = content_hash(t)
        return fp
    # Everything below is computed from a detached tensor, so none of it joins autograd's graph: no `no_grad()`,
    # whose context manager costs more than some of the statistics (3 us of a 40 us small fingerprint).
    x = t.detach()
    if x.is_complex() or x.is_quantized:
        x = as_real(x)
    n = x.numel()
    if n == 0:
        fp = empty_fingerprint()
    else:
        if n == 1:  # a scalar (a loss, a step count, an index): its value is its fingerprint
            stats = _one_element_stats(float(x.item()))
        elif x.is_cpu and (compiled := _compiled_stats()) is not None:
            # float32 and float64 read in place, strided views too; other dtypes from their float copy.
            readable = compiled.reads(x)
            if not readable:
                x = as_real(x) if scratch is None else scratch.flat_real(x)
                readable = compiled.reads(x)
            stats = (compiled.stats(x) if readable else None) or _torch_stats(x, scratch)
        else:
            stats = _torch_stats(x, scratch)
        fp = _finite_fingerprint(stats, n) or _nonfinite_fingerprint(as_real(t, torch.float64))
    if exact:
        fp["hash"] = content_hash(t)
    return fp


def fingerprint_in_place(t: torch.Tensor) -> Fingerprint | None:
    """`fingerprint(t)` for the common case, by the compiled statistics reading `t` where it lies: a plain float32 or
    float64 CPU tensor of more than one element, contiguous or a strided view, with memory of its own (not a
    functional wrapper or an efficient zero tensor). No torch op runs, so no dispatch mode sees one, unless a value
    is NaN or Inf: torch's ops count those, with every Python dispatch mode off (`t` is a plain tensor). None where
    `fingerprint` must take it."""
    compiled = _compiled_stats()
    if compiled is None or not compiled.reads(t):
        return None
    n = t.numel()
    stats = compiled.stats(t) if n > 1 else None
    if stats is None:
        return None
    fp = _finite_fingerprint(stats, n)
    if fp is not None:
        return fp
    with torch._C._DisableTorchDispatch():
        return _nonfinite_fingerprint(as_real(t, torch.float64))


def _finite_fingerprint(stats: list[float], n: int) -> Fingerprint | None:
    """The fingerprint from [sum, l1, sum of squares, max, *sketch] of `n` real elements, or None where a sum is
    not finite (NaN or Inf elements, or overflow: `_nonfinite_fingerprint` counts them)."""
    s, l1, sq = stats[0], stats[1], stats[2]
    if math.isfinite(s) and math.isfinite(l1) and math.isfinite(sq):  # floats already (ctypes, `tolist`)
        return _fingerprint_of(s, l1, sq, stats[3], 0, 0, n, stats[4:])
    return None


def _torch_stats(x: torch.Tensor, scratch: Scratch | None) -> list[float]:
    """[sum, l1, sum of squares, max |x|, *sketch] of real `x` by torch ops (any device)."""
    if x.numel() <= SKETCH_PERIOD:
        return _small_stats(x)
    return _large_stats(as_real(x) if scratch is None else scratch.flat_real(x), scratch)


@functools.lru_cache(maxsize=1)
def _compiled_stats() -> HostStats | None:
    """The one-pass C statistics for CPU tensors (record/fingerprints/host_stats.py), built on first use; None where they
    cannot be built (the torch ops serve then)."""
    return host_stats.load(SKETCH_PERIOD, SKETCH_WIDTH, sketch_masks())


def host_fingerprint_path() -> str:
    """How this process computes CPU tensors' statistics: the compiled pass (and which loop) or the torch ops."""
    compiled = _compiled_stats()
    return "torch ops" if compiled is None else compiled.description


@functools.lru_cache(maxsize=8)
def _sum_and_sketch_weights(device: str) -> torch.Tensor:
    """[1 + SKETCH_WIDTH, SKETCH_PERIOD] float64: a row of ones (the sum), then the sketch's signs. Rows, for
    `torch.mv`: on CPU a third faster than the vector-matrix product with their transpose."""
    ones = torch.ones((1, SKETCH_PERIOD), dtype=torch.float64, device=device)
    return torch.cat([ones, sketch_signs(device).t()], dim=0)


@functools.lru_cache(maxsize=1)
def _first_signs() -> tuple[float, ...]:
    """The sketch's signs of the first position."""
    return tuple(sketch_signs()[0].tolist())


def _one_element_stats(v: float) -> list[float]:
    """`_small_stats` of one element of value `v` (as float64), without a torch op: the same float64
    arithmetic on one value, so the same numbers (about 1 us against 40 for a dozen torch ops)."""
    a = abs(v)
    return [v, a, a * a, a, *(sign * v for sign in _first_signs())]


def _small_stats(x: torch.Tensor) -> list[float]:
    """[sum, l1, sum of squares, max |x|, *sketch] of real `x` (any shape) of at most one period of
    elements, in float64, by a few ops whose count, not the elements, is the cost: one vector-matrix
    product gives the sum and the sketch."""
    x64 = x.reshape(-1).to(torch.float64)
    a = x64.abs()
    head = torch.mv(_sum_and_sketch_weights(str(x.device))[:, : x64.numel()], x64)
    # (a * a).sum(), not a @ a: BLAS's dot on a few thousand elements may wake its threads, and on a busy
    # machine one waits milliseconds for them. keepdim: one-element vectors, joined by one `cat`.
    s, *sk, l1, sq, mx = torch.cat([head, a.sum(0, keepdim=True), (a * a).sum(0, keepdim=True),
                                    a.amax(0, keepdim=True)]).tolist()
    return [s, l1, sq, mx, *sk]


def _large_stats(x: torch.Tensor, scratch: Scratch | None = None) -> list[float]:
    """The same for a larger `x`, in its accumulation dtype: |x| once (then squared in place, in `scratch`
    where given), the sum and sketch from the fold, every result fetched in one read."""
    a = torch.abs(x, out=scratch.take(x.numel(), x.dtype, Scratch.ABS)) if scratch is not None and not x.is_cuda else x.abs()
    # keepdim: one-element vectors, joined by one `cat` (which widens them to float64). amax: about 2.5x faster
    # than max() on CPU. After it, the squares in place: no second temporary.
    parts = [sum_and_sketch(x), a.sum(0, keepdim=True), a.amax(0, keepdim=True)]
    parts.append(a.mul_(a).sum(0, keepdim=True))
    s, *sk, l1, mx, sq = torch.cat(parts).tolist()
    return [s, l1, sq, mx, *sk]


def _nonfinite_fingerprint(x: torch.Tensor) -> Fingerprint:
    """Statistics over the finite elements of float64 `x`, with NaN and Inf counted."""
    nan, inf = int(torch.isnan(x).sum()), int(torch.isinf(x).sum())
    finite = x[torch.isfinite(x)]
    if not finite.numel():
        return from_stats([0.0, 0.0, 0.0, 0.0, nan, inf] + [0.0] * SKETCH_WIDTH, x.numel())
    a = finite.abs()
    s, l1, mx, sq = torch.stack([finite.sum(), a.sum(), a.amax(), (a * a).sum()]).tolist()
    sk = sketch(torch.where(torch.isfinite(x), x, 0.0)).tolist()  # positions kept: NaN/Inf read as 0
    return from_stats([s, l1, sq, mx, nan, inf, *sk], x.numel())


def content_hash(t: torch.Tensor) -> str:
    """Digest of the logical contents (shape, dtype and values in row-major order)."""
    x = t.detach()
    if is_zero_tensor(x):  # no memory to read: hash the zeros it stands for
        x = torch.zeros(x.shape, dtype=x.dtype)
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
