"""A CPU tensor's fingerprint statistics in one pass, by a small C function compiled on first use.

The torch ops of `fingerprint._large_stats` read a large tensor about eight times and dispatch a dozen ops; on
the recorded CPU GPT-2 of `make bench` (2 layers, width 256, batch 4 x 128) they were 17 of a call's 28 ms
of recording cost. `host_stats.c` reads the tensor once, a strided view where it lies, float32 in float32
vectors, and takes the sketch's signs as bits (BENCHMARKS.md, issue 15's ninth to eleventh passes). It is
compiled with the system's C compiler (the one inductor's CPU backend needs too; no torch headers, so well
under a second) into a cache directory and loaded with ctypes. Where there is no compiler, the compile fails,
or TRACEDIFF_HOST_FINGERPRINT=torch, fingerprints take the torch ops as before: the same statistics, within
float32 rounding.

Where torch's libgomp is loaded (Linux builds of torch), it is built with OpenMP and bound to that library
(never a second OpenMP runtime with threads of its own), so tensors of `THREADS_FROM` elements or more are
split over torch's own thread pool, `torch.get_num_threads()` wide. Only in the process that loaded it: a
forked child inherits no pool threads, and libgomp would wait on them.

The shared object is named by a digest of its source, the compile command and the machine, so an edited
source or another compiler builds anew, and concurrent recordings each write their own file and rename it
into place (atomic), never loading a half-written one.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("host_stats.c")
# Reassociation, so the sums vectorize; no -ffast-math, whose finite-math assumption could fold NaN checks away.
_FLAGS = ["-O3", "-fPIC", "-fno-trapping-math", "-fno-signed-zeros", "-fassociative-math"]
_COMPILE_SECONDS = 120
# Elements from which a tensor is split over threads: below, starting them costs more than they save (a
# tensor just written by a torch op, 2 cores: 32768 elements 21 us either way, 131072 54 -> 37 us).
THREADS_FROM = 1 << 16
# Tensor types whose data a fingerprint reads directly, with no subclass dispatch to honour (their memory is
# their data; a subclass's may not be).
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


class HostStats:
    """`stats(x)`: [sum, l1, sum of squares, max |x|, *sketch] of a float32 or float64 CPU tensor, contiguous or a
    strided view (read in place, in row-major order), as `fingerprint._small_stats` computes them (NaN or Inf make
    some of them non-finite, as there)."""

    MAX_DIMS = 8  # host_stats.c's: a view of more dims is copied first

    def __init__(self, library: ctypes.CDLL, masks: torch.Tensor, width: int, threaded: bool) -> None:
        self._masks = masks  # held: the C function reads its memory
        self._masks_at = masks.data_ptr()
        self._out_type = ctypes.c_double * (4 + width)  # the statistics' array type, made once
        self._threads_in = os.getpid() if threaded else None
        self._by_dtype = {}
        for dtype, name in ((torch.float32, "tracediff_stats_f32"), (torch.float64, "tracediff_stats_f64")):
            function = getattr(library, name)
            function.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
            function.restype = ctypes.c_int
            self._by_dtype[dtype] = function
        library.tracediff_share_bytes.restype = ctypes.c_int64
        self._share_bytes = int(library.tracediff_share_bytes())
        # The threads' working memory, kept from call to call (a fresh one faulted its pages in each time); one
        # call at a time uses it, the others (another Python thread's: the call releases the GIL) allocate their own.
        self._workspace: ctypes.Array[ctypes.c_char] | None = None
        self._workspace_at = 0  # its address, taken once: `ctypes.addressof` raises an audit event per call
        self._workspace_lock = threading.Lock()
        self.avx2 = bool(library.tracediff_float32_avx2())

    @property
    def description(self) -> str:
        """How this build computes, for a trace's header: e.g. "compiled, avx2, split over torch's threads"."""
        parts = ["compiled", "avx2" if self.avx2 else "portable"]
        if self._threads_in is not None:
            parts.append("split over torch's threads")
        return ", ".join(parts)

    def reads(self, x: torch.Tensor) -> bool:
        """Whether `stats` may read `x`'s memory as it is: a plain (no subclass), dense float32 or float64 CPU tensor
        of at most MAX_DIMS dims whose memory holds its values. Not a sparse, MKLDNN or nested tensor (their memory
        is not their values in row-major order), a wrapper subclass (a DTensor's shard may be a functional
        collective's AsyncCollectiveTensor, whose data pointer is no data), a functional wrapper, an efficient zero
        tensor (no memory at all), a negated view, or a tensor whose storage no longer holds it."""
        return (type(x) in PLAIN_TENSORS and x.layout == torch.strided and not x.is_nested and x.dtype in self._by_dtype
                and x.is_cpu and x.dim() <= self.MAX_DIMS and not x.is_neg() and not torch._is_functional_tensor(x)
                and not x._is_zerotensor() and memory_holds(x))

    def stats(self, x: torch.Tensor) -> list[float] | None:
        """The statistics of `x` (which `reads`), or None where the C function could not allocate its buffers."""
        n = x.numel()
        threads = torch.get_num_threads() if n >= THREADS_FROM and self._threads_in == os.getpid() else 1
        out = self._out_type()
        if x.is_contiguous():
            ndim, sizes, strides = 0, None, None
        else:
            ndim = x.dim()
            sizes, strides = (ctypes.c_int64 * ndim)(*x.shape), (ctypes.c_int64 * ndim)(*x.stride())
        # Never waits for the lock: a forked child may inherit it held by a thread it does not have.
        mine = self._workspace_lock.acquire(blocking=False)
        try:
            workspace, size = self._workspace_for(threads) if mine else (None, 0)
            status = self._by_dtype[x.dtype](x.data_ptr(), n, ndim, sizes, strides, threads, self._masks_at, out,
                                             workspace, size)
        finally:
            if mine:
                self._workspace_lock.release()
        return None if status != 0 else out[:]

    def _workspace_for(self, threads: int) -> tuple[int, int]:
        """The workspace's address and size, grown to hold `threads` shares."""
        size = threads * self._share_bytes
        if self._workspace is None or len(self._workspace) < size:
            self._workspace = ctypes.create_string_buffer(size)
            self._workspace_at = ctypes.addressof(self._workspace)
        return self._workspace_at, len(self._workspace)


def memory_holds(x: torch.Tensor) -> bool:
    """Whether `x`'s storage still covers every element its geometry reaches. A program may free a tensor's memory
    and keep the tensor (`untyped_storage().resize_(0)`, as FSDP2 does with a parameter between uses): reading it
    then reads freed memory, in torch's ops as in the compiled statistics (a segfault, not an error). True where
    there is no storage to tell by (a sparse tensor): its own ops read it."""
    try:
        storage_bytes = x.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return True
    if x.is_contiguous():
        end = x.storage_offset() + x.numel()
    elif x.numel() == 0:
        return True
    else:
        end = x.storage_offset() + 1 + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride()))
    return end * x.element_size() <= storage_bytes


class BuildError(Exception):
    """The C compiler is missing or failed."""


def load(period: int, width: int, masks: torch.Tensor) -> HostStats | None:
    """The compiled statistics for a sketch of `width` sums of `period` signs (`masks`: [period] int32, bit j of
    masks[c] set where sign j of column c is +1), or None where they cannot be built here (the torch ops serve
    then)."""
    if os.environ.get("TRACEDIFF_HOST_FINGERPRINT", "") == "torch":
        return None
    for threaded in ((True, False) if _torch_libgomp_loaded() else (False,)):
        try:
            library = ctypes.CDLL(str(build(period, width, threaded=threaded)))
        except (OSError, subprocess.SubprocessError, BuildError):
            continue
        return HostStats(library, masks.to(torch.int32).contiguous(), width, threaded)
    return None


def build(period: int, width: int, threaded: bool = False, cache: Path | None = None,
          defines: tuple[str, ...] = ()) -> Path:
    """The shared object for this source, compile command and machine: from the cache, else compiled into it.
    `threaded`: with OpenMP, its runtime's symbols left unresolved (no libgomp named), to be bound at load time
    to the one torch has loaded; where none is loaded globally, loading it fails. `defines`: more macros
    (TRACEDIFF_PORTABLE: the portable loop alone, which tests compare with the AVX2 one)."""
    compiler = _compiler()
    command = [compiler, *_FLAGS, f"-DPERIOD={period}", f"-DWIDTH={width}", *(f"-D{name}" for name in defines)]
    if threaded:
        command.append("-fopenmp")
    if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64"):
        command.append("-DTRACEDIFF_CLONES")
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(repr((command, platform.machine(), sys.platform)).encode())
    directory = cache or cache_directory()
    target = directory / f"host_stats-{digest.hexdigest()[:16]}.so"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as work:
        objects, partial = os.path.join(work, "host_stats.o"), os.path.join(work, target.name)
        # Compiled, then linked without -fopenmp: that would name the system's libgomp, a second runtime.
        for step in ([*command, "-c", str(SOURCE), "-o", objects], [compiler, "-shared", objects, "-o", partial]):
            done = subprocess.run(step, capture_output=True, text=True, timeout=_COMPILE_SECONDS)
            if done.returncode != 0:
                raise BuildError(f"{compiler} failed: {done.stderr.strip()[-500:]}")
        os.replace(partial, target)
    return target


def cache_directory() -> Path:
    """$TRACEDIFF_CACHE_DIR, else tracediff/ under $XDG_CACHE_HOME or ~/.cache."""
    explicit = os.environ.get("TRACEDIFF_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tracediff"


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (path := shutil.which(name)):
            return path
    raise BuildError("no C compiler (cc, gcc or clang) on PATH")


def _torch_libgomp_loaded() -> bool:
    """Whether this process has a libgomp mapped (torch's, on Linux builds): only then is an OpenMP build
    tried."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return False
