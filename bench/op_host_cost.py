"""Host cost of recording one op, in parts: 3000 `torch.add`s (and 3000 `view`s) on 16-element tensors (so
fingerprints cost their fixed part only), recorded whole, without fingerprints, without writing records, and
without describing tensors, next to the same loop under a dispatch mode that does nothing but run each op (what
any dispatch mode costs). Medians of 7 rounds, microseconds per op.

    python bench/op_host_cost.py
    python bench/op_host_cost.py --device cuda   # device fingerprints; each round ends with a synchronize
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from timing import synchronizer  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import tracediff  # noqa: E402
from tracediff.record.mode import TraceRecorder  # noqa: E402
from tracediff.record.tensor_describer import TensorDescriber  # noqa: E402

OPS = 3000


@contextlib.contextmanager
def patched(patches: list[tuple[type, str, Any]]) -> Iterator[None]:
    """Each (class, attribute, value) set while inside, the class's own attribute restored after."""
    saved = [(cls, name, cls.__dict__[name]) for cls, name, _ in patches]
    for cls, name, value in patches:
        setattr(cls, name, value)
    try:
        yield
    finally:
        for cls, name, value in saved:
            setattr(cls, name, value)


class RunEachOp(TorchDispatchMode):
    """The floor: a dispatch mode that only runs the op."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        return func(*args, **(kwargs or {}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    options = parser.parse_args()
    device = options.device
    x, w = torch.randn(16, device=device), torch.randn(16, device=device)
    sync = synchronizer(device)
    trace = Path(tempfile.mkdtemp(prefix="tracediff-ophost-")) / "t.jsonl"

    def adds() -> float:
        sync()
        start = time.perf_counter()
        y = x
        for _ in range(OPS):
            y = torch.add(y, w)
        sync()
        return time.perf_counter() - start

    def views() -> float:
        sync()
        start = time.perf_counter()
        for _ in range(OPS):
            x.view(4, 4)
        sync()
        return time.perf_counter() - start

    no_fingerprint: list[tuple[type, str, Any]] = [(TraceRecorder, "_fingerprint", lambda self, t: None)]
    no_writing: list[tuple[type, str, Any]] = [*no_fingerprint, (TraceRecorder, "_write_op", lambda self, *a: None)]
    variants: dict[str, list[tuple[type, str, Any]]] = {
        "recorded": [],
        "without fingerprints": no_fingerprint,
        "without writing records": no_writing,
        "without describing tensors": [*no_writing,
                                       (TensorDescriber, "describe", lambda self, name, t, *a, **k: {"v": None})],
    }
    for name, work in (("add", adds), ("view", views)):
        def recorded(work: Callable[[], float] = work) -> float:
            with tracediff.record(trace):
                return work()

        def run_each_op(work: Callable[[], float] = work) -> float:
            with RunEachOp():
                return work()

        times: dict[str, list[float]] = {"plain": [], "a dispatch mode that runs each op": [], **{v: [] for v in variants}}
        recorded()
        for _ in range(7):
            times["plain"].append(work())
            times["a dispatch mode that runs each op"].append(run_each_op())
            for variant, patch in variants.items():
                with patched(patch):
                    times[variant].append(recorded())
        print(f"{name} on {device}:")
        for variant, samples in times.items():
            print(f"  {variant:34s} {statistics.median(samples) / OPS * 1e6:6.1f} us per op")
    return 0


if __name__ == "__main__":
    sys.exit(main())
