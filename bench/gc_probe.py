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
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from timing import collections_during, timed_calls  # noqa: E402

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
            with collections_during() as spent:
                _, times = timed_calls(fn, sync, CALLS)
        print(f"  {label:9s} median {statistics.median(times) * 1e3:7.2f} ms per call; collections per call: "
              + "  ".join(f"generation {g} {n / CALLS:.1f} ({s / CALLS * 1e3:.3f} ms)" for g, (s, n) in enumerate(spent)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
