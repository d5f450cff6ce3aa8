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
