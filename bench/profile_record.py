"""Where recording's time goes, per op: cProfile of one recorded call of a workload, grouped.

    python bench/profile_record.py hf_gpt2                 # CPU size
    python bench/profile_record.py hf_gpt2 --device cuda   # GPU size (eager; --compiled: inductor)

Prints the workload's plain and recorded time per call (medians, interleaved), the records per call,
the host time recording adds per record in microseconds, and the profile of one recorded call: the
functions with the most time of their own, and that time summed by where it is spent (tracediff's
modules, torch's tensor methods, the rest). cProfile slows Python code down about 1.5-2x, so the
profile's shares, not its totals, are what to read.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from timing import synchronizer, timed_calls  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compiled", action="store_true", help="the model under torch.compile (inductor)")
    parser.add_argument("--no-fingerprints", action="store_true",
                        help="diagnosis: record without fingerprinting any tensor (what the rest of recording costs)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--top", type=int, default=30)
    options = parser.parse_args()
    import torch
    import workloads

    import tracediff

    fn = workloads.make(options.workload, device=options.device, compiled=options.compiled)
    if options.no_fingerprints:
        from tracediff.record.mode import TraceRecorder

        TraceRecorder._fingerprint = lambda self, t: None  # type: ignore[method-assign]
    sync = synchronizer(options.device)
    trace = Path(tempfile.mkdtemp(prefix="tracediff-profile-")) / "t.jsonl"

    # Host times are until the call returns: on CUDA its work may still be queued.
    timed_calls(fn, sync, 2)  # warm-up (and the compile, with --compiled)
    host, plain = timed_calls(fn, sync, options.reps)
    host_plain = statistics.median(host)
    profile = cProfile.Profile()
    if options.compiled:
        # Generated kernels are recorded where their graph is compiled inside the recording (BENCHMARKS.md, issue 4):
        # compiled again by its first call in the session (from inductor's cache on disk), and after it for plain.
        torch._dynamo.reset()
    # One recording around warm-up, timed calls and the profiled call, as `tracediff run` records a script.
    with tracediff.record(trace) as session:
        timed_calls(fn, sync, 2)
        records_before = session.recorder.ops + session.recorder.kernels
        host, recorded = timed_calls(fn, sync, options.reps)
        host_recorded = statistics.median(host)
        records = (session.recorder.ops + session.recorder.kernels - records_before) / options.reps
        profile.enable()
        timed_calls(fn, sync, 1)
        profile.disable()
    if options.compiled:
        torch._dynamo.reset()
        timed_calls(fn, sync, 1)
    plain += timed_calls(fn, sync, options.reps)[1]
    p, r = statistics.median(plain), statistics.median(recorded)
    print(f"{options.workload} on {options.device}{' compiled' if options.compiled else ''}: plain {p * 1e3:.2f} ms, "
          f"recorded {r * 1e3:.2f} ms ({r / p:.2f}x), {records:.0f} records per call, "
          f"{(r - p) / max(records, 1) * 1e6:.1f} us per record; host (until the call returns) "
          f"{host_plain * 1e3:.2f} / {host_recorded * 1e3:.2f} ms")
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(options.top)
    groups: dict[str, float] = defaultdict(float)
    for (path, _, function), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "/tracediff/" in path:
            key = "tracediff/" + path.split("/tracediff/")[-1]
        elif path == "~" and ("torch._C" in function or "Tensor" in function):
            key = "torch C calls: " + function
        elif "/torch/" in path:
            key = "torch (python)"
        else:
            key = "other: " + (function if path == "~" else Path(path).name)
        groups[key] += own
    total = sum(groups.values())
    print("own time by where it is spent:")
    for key, own in sorted(groups.items(), key=lambda kv: -kv[1])[:options.top]:
        print(f"  {own / total:6.1%}  {own * 1e3:8.2f} ms  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
