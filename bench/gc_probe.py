"""Time the cyclic garbage collector takes inside a workload's calls, plain and recorded.

    python3 bench/gc_probe.py hf_gpt2 --device cuda

Counts the collections of each generation started during 20 calls and the time they took (`gc.callbacks`),
plain and inside one recording, twice each.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from timing import timed_calls  # noqa: E402

CALLS = 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--device", default="cpu")
    options = parser.parse_args()
    import torch
    import workloads

    import tracediff

    fn = workloads.make(options.workload, device=options.device)
    cuda = options.device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()  # looked up at each call: the recording hooks it

    spent = {generation: [0.0, 0] for generation in range(3)}
    started = [0.0]

    def clock(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            cell = spent[info["generation"]]
            cell[0] += time.perf_counter() - started[0]
            cell[1] += 1

    for _ in range(2):
        fn()
    sync()
    print(f"{options.workload} on {options.device}: objects the collector tracks {len(gc.get_objects())}, "
          f"thresholds {gc.get_threshold()}")
    trace = Path(tempfile.mkdtemp()) / "t.jsonl"
    for label in ("plain", "recorded", "plain", "recorded"):
        session = tracediff.record(trace) if label == "recorded" else contextlib.nullcontext()
        with session:
            fn()
            sync()
            for cell in spent.values():
                cell[0], cell[1] = 0.0, 0
            gc.callbacks.append(clock)
            try:
                _, times = timed_calls(fn, sync, CALLS)
            finally:
                gc.callbacks.remove(clock)
        print(f"  {label:9s} median {statistics.median(times) * 1e3:7.2f} ms per call; collections per call: "
              + "  ".join(f"generation {g} {n / CALLS:.1f} ({s / CALLS * 1e3:.3f} ms)" for g, (s, n) in spent.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
