"""Where one call's device time goes, plain and recorded: kernel time by kind, from the CUDA profiler.

    python3 bench/gpu_timeline.py hf_gpt2

For one call of the workload (after warm-up calls) plain and inside a recording: the host time until the call
returns, the span from the first kernel to the last and the time some kernel ran, kernel time summed by kind
(GEMMs, fingerprint kernels, copies and fills, the rest), and the last kernels. The profiler slows the host,
so host times here are not the benchmark's; device times are. Needs CUDA.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))


def _kind(name: str) -> str:
    lowered = name.lower()
    if "partial_stats" in name:
        return "fingerprint"
    if any(word in lowered for word in ("gemm", "cutlass", "cublas")):
        return "gemm"
    if any(word in lowered for word in ("copy", "memset", "memcpy")):
        return "copy/fill"
    return "other"


def _busy_us(spans: list[tuple[float, float]]) -> float:
    """Time covered by at least one of the (start, end) spans."""
    busy, current = 0.0, None
    for start, end in sorted(spans):
        if current is None or start > current[1]:
            if current is not None:
                busy += current[1] - current[0]
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    return busy + (current[1] - current[0] if current is not None else 0.0)


def timeline(label: str, fn: Callable[[], Any], session: Any) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with session:
        for _ in range(3):
            fn()
            torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            fn()
            host = time.perf_counter() - start
            torch.cuda.synchronize()
            total = time.perf_counter() - start
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and e.time_range.elapsed_us() > 0]
    if not kernels:
        print(f"{label}: no kernels seen")
        return
    spans = [(e.time_range.start, e.time_range.end) for e in kernels]
    by_kind: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for e in kernels:
        by_kind[_kind(e.name)] += e.time_range.elapsed_us()
        count[_kind(e.name)] += 1
    span = max(end for _, end in spans) - min(start for start, _ in spans)
    print(f"{label}: host {host * 1e3:.2f} ms, call {total * 1e3:.2f} ms (profiled); kernels from first to last "
          f"{span / 1e3:.2f} ms, some kernel running {_busy_us(spans) / 1e3:.2f} ms")
    for kind, us in by_kind.most_common():
        print(f"    {kind:12s} {us / 1e3:7.2f} ms  {count[kind]} kernels")
    last = sorted(kernels, key=lambda e: e.time_range.end)[-4:]
    print("    last kernels: " + ", ".join(f"{e.name[:40]} {e.time_range.elapsed_us() / 1e3:.2f} ms" for e in last))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    options = parser.parse_args()
    import torch
    import workloads

    import tracediff

    if not torch.cuda.is_available():
        print("bench/gpu_timeline.py: no CUDA device; nothing measured")
        return 0
    fn = workloads.make(options.workload, device="cuda")
    timeline("plain", fn, contextlib.nullcontext())
    timeline("recorded", fn, tracediff.record(Path(tempfile.mkdtemp()) / "t.jsonl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
