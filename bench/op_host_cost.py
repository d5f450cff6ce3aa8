"""Host cost of recording one op, in parts: 3000 `torch.add`s on 16-element CPU tensors (so fingerprints
cost their fixed part only), recorded whole, without fingerprints, without writing records, and
without describing tensors. Medians of 7 rounds, microseconds per op.

    python bench/op_host_cost.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import tracediff  # noqa: E402
from tracediff.record.mode import TraceRecorder  # noqa: E402

OPS = 3000


def main() -> int:
    x, w = torch.randn(16), torch.randn(16)
    trace = Path(tempfile.mkdtemp(prefix="tracediff-ophost-")) / "t.jsonl"

    def work() -> float:
        start = time.perf_counter()
        y = x
        for _ in range(OPS):
            y = torch.add(y, w)
        return time.perf_counter() - start

    def recorded() -> float:
        with tracediff.record(trace):
            return work()

    no_fingerprint = {"_fingerprint": lambda self, t: None}
    variants: dict[str, dict[str, Any]] = {
        "recorded": {},
        "without fingerprints": no_fingerprint,
        "without writing records": {**no_fingerprint, "_write_op": lambda self, *a: None},
        "without describing tensors": {**no_fingerprint, "_write_op": lambda self, *a: None,
                                       "_describe": lambda self, name, t, *a, **k: {}},
    }
    original = {name: getattr(TraceRecorder, name) for name in ("_fingerprint", "_write_op", "_describe")}
    times: dict[str, list[float]] = {"plain": [], **{v: [] for v in variants}}
    recorded()
    for _ in range(7):
        times["plain"].append(work())
        for variant, patch in variants.items():
            for name, value in patch.items():
                setattr(TraceRecorder, name, value)
            try:
                times[variant].append(recorded())
            finally:
                for name, value in original.items():
                    setattr(TraceRecorder, name, value)
    for variant, samples in times.items():
        print(f"{variant:28s} {statistics.median(samples) / OPS * 1e6:6.1f} us per op")
    return 0


if __name__ == "__main__":
    sys.exit(main())
