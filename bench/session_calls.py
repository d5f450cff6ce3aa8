"""Per-call times of several recording sessions in one process, from each session's first call.

    python bench/session_calls.py hf_gpt2 --device cuda              # 3 sessions of 16 calls, plain calls around
    python bench/session_calls.py hf_gpt2 --sessions 2 --calls 8     # CPU

Tells a session's warm-up (its first call reads every weight; on CUDA the process's first also compiles the
fingerprint kernels) from the steady state that bench/gpu.py and bench/run.py time, and either from a slow stretch
of the host (plain calls before and after, in the same process). Prints each call's host time (until it returns)
and total time (until a synchronize after it), in ms.

`--parts`: also, for each session, the recorder's main functions' inclusive time per call (as
`record_ablation.py --timers` clocks them, about a microsecond per timed call) and the garbage collections
started during its calls: a session slower than the others says which part grew.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from timing import collections_during, synchronizer, timed_calls  # noqa: E402


def _line(label: str, seconds: list[float]) -> str:
    return f"{label}: " + " ".join(f"{s * 1e3:.1f}" for s in seconds)


def _parts_line(spent: dict[str, list[float]], collections: list[list[float]], calls: int, top: int = 12) -> str:
    parts = sorted(((name, seconds) for name, (seconds, count) in spent.items() if count), key=lambda p: -p[1])
    text = "  ".join(f"{name} {seconds / calls * 1e3:.2f}" for name, seconds in parts[:top])
    gcs = "  ".join(f"gen{g} {n / calls:.1f}x {s / calls * 1e3:.2f}" for g, (s, n) in enumerate(collections))
    return f"    parts, ms per call: {text}\n    collections per call: {gcs}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--calls", type=int, default=16, help="recorded calls per session, the first included")
    parser.add_argument("--plain", type=int, default=10, help="plain calls before the sessions and after them")
    parser.add_argument("--parts", action="store_true", help="also: the recorder's parts and the collections per session")
    options = parser.parse_args()
    import workloads

    import tracediff

    fn = workloads.make(options.workload, device=options.device)
    sync = synchronizer(options.device)
    for _ in range(3):
        fn()
    sync()
    print(f"{options.workload} on {options.device}: ms per call, host (until it returns) and total (to a synchronize)")
    hosts, totals = timed_calls(fn, sync, options.plain)
    print(_line("plain before, host ", hosts))
    print(_line("plain before, total", totals))
    scratch = Path(tempfile.mkdtemp(prefix="tracediff-sessions-"))
    if options.parts:
        from op_host_cost import patched
        from record_ablation import timed_parts, timers
    for s in range(options.sessions):
        if not options.parts:
            with tracediff.record(scratch / f"session-{s}.jsonl"):
                hosts, totals = timed_calls(fn, sync, options.calls)
        else:
            spent, patches = timers(timed_parts(options.device))
            with patched(patches), tracediff.record(scratch / f"session-{s}.jsonl"), collections_during() as collections:
                hosts, totals = timed_calls(fn, sync, options.calls)
        print(_line(f"session {s}, host     ", hosts))
        print(_line(f"session {s}, total    ", totals))
        if options.parts:
            print(_parts_line(spent, collections, options.calls))
    hosts, totals = timed_calls(fn, sync, options.plain)
    print(_line("plain after, host  ", hosts))
    print(_line("plain after, total ", totals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
