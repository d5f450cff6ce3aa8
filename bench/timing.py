"""Calls timed the same way in every recording benchmark: until the call returns, and until a synchronize."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def synchronizer(device: str) -> Callable[[], None]:
    """What to call after a call to wait for `device`: `torch.cuda.synchronize` on CUDA, nothing on the CPU.
    Looked up at each call, not bound once: a recording hooks it to write its held records while the device
    works (record/host_waits.py)."""
    if not device.startswith("cuda"):
        return lambda: None
    import torch

    return lambda: torch.cuda.synchronize()


def timed_calls(fn: Callable[[], Any], sync: Callable[[], Any], calls: int) -> tuple[list[float], list[float]]:
    """Seconds of each of `calls` calls of `fn`: until it returns (host), and until `sync()` after it (total)."""
    hosts, totals = [], []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        hosts.append(time.perf_counter() - start)
        sync()
        totals.append(time.perf_counter() - start)
    return hosts, totals


def python_loop_seconds(iterations: int = 20_000) -> float:
    """Seconds a fixed pure-Python loop takes here, now: the host's speed at the moment, by one measure that no
    recording, allocator or device touches. The device machines' hosts are shared: this loop's time swings by
    1.4-1.9x for stretches of seconds (BENCHMARKS.md, recording cost, thirteenth pass), and a recording, which is
    host work, swings with it, where a plain call waiting on its device does not."""
    start = time.perf_counter()
    total = 0
    for i in range(iterations):
        total += i * i
    return time.perf_counter() - start

