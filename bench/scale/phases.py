"""CPU seconds and peak RSS of each phase of one diff, one after another in this process:

    python bench/scale/phases.py PAIR_DIR [CODE_ROOT]

PAIR_DIR holds a.jsonl and b.jsonl (bench/synth.py's pairs); CODE_ROOT (default: this checkout) is the tracediff
whose phases are timed, so two checkouts can be compared. The skeletons are built in memory, not spilled, and
the cycle collector is left on: a probe of where the time goes, not the end-to-end figure (`measure.py`).
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

pair = Path(sys.argv[1])
sys.path.insert(0, sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).resolve().parents[2]))

from tracediff.config import Config  # noqa: E402
from tracediff.diff.align import align  # noqa: E402
from tracediff.diff.skeleton import build_skeleton  # noqa: E402
from tracediff.diff.verdict import find_divergence  # noqa: E402


def phase(name: str, call: Callable[[], Any]) -> Any:
    cpu, wall = time.process_time(), time.perf_counter()
    value = call()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{name}: {time.process_time() - cpu:.1f} s CPU, {time.perf_counter() - wall:.1f} s wall, "
          f"peak {peak:.0f} MiB", flush=True)
    return value


a = phase("skeleton_a", lambda: build_skeleton(pair / "a.jsonl"))
b = phase("skeleton_b", lambda: build_skeleton(pair / "b.jsonl"))
partner, tier = phase("align", lambda: align(a, b))
result = phase("verdict", lambda: find_divergence(a, b, partner, tier, Config()))
first = result.first
print(f"first divergence: A #{first.a.index} {first.a.op}" if first else "match", f"; {result.paired:,} pairs")
