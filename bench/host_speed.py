"""How steady this host's speed is: a fixed pure-Python loop (`timing.python_loop_seconds`), timed over and over.

    python3 bench/host_speed.py 20        # seconds to probe

Prints the loop's time at its 10th, 50th, 90th and 99th percentiles and the share of runs slower than 1.4 times
its 10th percentile. On a shared host (the device machines') a recording's time follows these swings: read a
recording benchmark next to them (BENCHMARKS.md section 7, thirteenth pass).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import python_loop_seconds  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seconds", nargs="?", type=float, default=10.0, help="how long to probe (default 10)")
    seconds = parser.parse_args().seconds
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        times.append(python_loop_seconds() * 1e3)
    times.sort()

    def at(share: float) -> float:
        return times[int(share * (len(times) - 1))]

    slow = sum(t > 1.4 * at(0.1) for t in times) / len(times)
    print(f"python loop ms over {len(times)} runs: p10 {at(0.1):.3f}  p50 {at(0.5):.3f}  p90 {at(0.9):.3f}  "
          f"p99 {at(0.99):.3f}; slower than 1.4x p10: {slow:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
