"""Where a recorded call's host time goes, by sampling: no profiler hooks on every call, so no distortion.

    python bench/sample_record.py hf_gpt2                    # CPU
    python bench/sample_record.py hf_gpt2 --device cuda --calls 80
    python bench/sample_record.py hf_gpt2 --device cuda --compiled   # inductor, compiled inside the recording

Times plain calls, then records `--calls` calls in one session while a CPU-time timer (SIGPROF, every
`--interval` ms) samples the Python stack. Prints the share of samples per function executing ("leaf": time in
C called from a Python frame counts for that frame, so torch's own dispatch shows as the next Python function it
calls, `find_torch_dispatch_rule`), per line of tracediff's own code, and per function anywhere on the stack
("inclusive"); with `--callers FILE:FUNCTION`, who calls that function. bench/profile_record.py gives exact
call counts instead, with cProfile's cost on every call.
"""

from __future__ import annotations

import argparse
import collections
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))


class Samples:
    """Counts of sampled stacks: the executing function, tracediff's executing line, every function on the stack."""

    def __init__(self, callers_of: str | None = None) -> None:
        self.total = 0
        self.callers_of = callers_of  # a function ("file.py:name") whose callers are counted, wherever on the stack
        self.callers: collections.Counter[str] = collections.Counter()
        self.leaf: collections.Counter[str] = collections.Counter()
        self.lines: collections.Counter[str] = collections.Counter()
        self.inclusive: collections.Counter[str] = collections.Counter()

    def take(self, _signal: int, frame: FrameType | None) -> None:
        self.total += 1
        seen: set[str] = set()
        first = True
        while frame is not None:
            code = frame.f_code
            name = f"{Path(code.co_filename).name}:{code.co_name}"
            if first:
                self.leaf[name] += 1
                if "tracediff" in code.co_filename:
                    self.lines[f"{Path(code.co_filename).name}:{frame.f_lineno}"] += 1
                first = False
            if name not in seen:
                self.inclusive[name] += 1
                seen.add(name)
            caller = frame.f_back
            if name == self.callers_of and caller is not None:
                self.callers[f"{Path(caller.f_code.co_filename).name}:{caller.f_code.co_name}"] += 1
            frame = caller

    def print(self, top: int) -> None:
        tables = [("executing", self.leaf), ("tracediff's lines", self.lines), ("on the stack", self.inclusive)]
        if self.callers_of:
            tables.append((f"callers of {self.callers_of}", self.callers))
        for title, counts in tables:
            print(f"== {title} (% of {self.total} samples)")
            for name, count in counts.most_common(top):
                print(f"  {100 * count / self.total:5.1f}%  {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--calls", type=int, default=60, help="recorded calls sampled")
    parser.add_argument("--interval", type=float, default=0.2, help="ms of CPU time between samples")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--callers", metavar="FILE:FUNCTION",
                        help="also count who calls this function (as printed, e.g. _api.py:_audit_fork_safety)")
    parser.add_argument("--compiled", action="store_true",
                        help="torch.compile (inductor) the workload; it compiles inside the recording, so no plain calls")
    options = parser.parse_args()
    import torch
    import workloads

    import tracediff

    fn = workloads.make(options.workload, device=options.device, compiled=options.compiled)
    cuda = options.device.startswith("cuda")

    def call() -> float:
        """One call's host time (until it returns), then its wait for the device."""
        start = time.perf_counter()
        fn()
        host = time.perf_counter() - start
        if cuda:
            torch.cuda.synchronize()
        return host

    if not options.compiled:  # a compiled workload's kernels are recorded only if it compiles in the recording
        for _ in range(3):
            call()
        start = time.perf_counter()
        plain_host = sum(call() for _ in range(20)) / 20
        print(f"plain: {(time.perf_counter() - start) / 20 * 1e3:.2f} ms per call, host {plain_host * 1e3:.2f} ms")
    samples = Samples(options.callers)
    with tracediff.record(Path(tempfile.mkdtemp()) / "sampled.jsonl"):
        for _ in range(3):
            call()
        signal.signal(signal.SIGPROF, samples.take)
        signal.setitimer(signal.ITIMER_PROF, options.interval / 1e3, options.interval / 1e3)
        start = time.perf_counter()
        host = sum(call() for _ in range(options.calls)) / options.calls
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        print(f"recorded: {(time.perf_counter() - start) / options.calls * 1e3:.2f} ms per call, "
              f"host {host * 1e3:.2f} ms")
    samples.print(options.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
