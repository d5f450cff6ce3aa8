"""How fast the compiled code runs: each call of each function or module the script compiles, timed.

In an unrecorded run of the script (recording would be what is timed), every
compiled function or module is wrapped: each call is timed to the device
finishing its work. The first call compiles, so it is left out. A region
called fewer than TIMED_CALLS times more is called again with its last
arguments once the script has ended, until it has that many timed calls.
The figure of a run is the sum over regions of their median call: the time
of one call of each, as `make bench` times a workload.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

TIMED_CALLS = 5


def _synchronize() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@dataclass
class _Region:
    name: str
    call: Callable[..., Any]  # the compiled function or module, wrapped or hooked so that a call times itself
    times_ms: list[float] = field(default_factory=list)  # every call's, the first (compiling) one included
    last: tuple[tuple[Any, ...], dict[str, Any]] | None = None


class CallTimer:
    """Wraps what `torch.compile` returns (CompileRedirect's `wrap`), then `finish(path)` writes the times."""

    def __init__(self) -> None:
        self.regions: list[_Region] = []

    def wrap(self, model: Any, compiled: Any) -> Any:
        name = type(model).__name__ if isinstance(model, torch.nn.Module) else getattr(model, "__qualname__", "fn")
        if isinstance(compiled, torch.nn.Module):
            region = _Region(name, compiled)  # its hooks time each call
            started: list[float] = []

            def pre_hook(_module: Any, args: Any, kwargs: Any) -> None:
                region.last = (args, kwargs)
                _synchronize()
                started.append(time.perf_counter())

            def post_hook(_module: Any, _args: Any, _kwargs: Any, _out: Any) -> None:
                _synchronize()
                region.times_ms.append((time.perf_counter() - started.pop()) * 1e3)

            compiled.register_forward_pre_hook(pre_hook, with_kwargs=True)
            compiled.register_forward_hook(post_hook, with_kwargs=True)
            self.regions.append(region)
            return compiled

        @functools.wraps(model)
        def timed(*args: Any, **kwargs: Any) -> Any:
            region.last = (args, kwargs)
            _synchronize()
            start = time.perf_counter()
            out = compiled(*args, **kwargs)
            _synchronize()
            region.times_ms.append((time.perf_counter() - start) * 1e3)
            return out

        region = _Region(name, timed)
        self.regions.append(region)
        return timed

    def _top_up(self, region: _Region) -> None:
        """Call the region again with its last arguments until it has TIMED_CALLS timed calls."""
        if region.last is None:
            return
        args, kwargs = region.last
        while len(region.times_ms) < TIMED_CALLS + 1:
            before = len(region.times_ms)
            try:
                region.call(*args, **kwargs)  # times itself
            except Exception:  # noqa: BLE001 - a call that cannot be repeated: time what the script made
                return
            if len(region.times_ms) == before:
                return

    def finish(self, path: Path) -> None:
        for region in self.regions:
            self._top_up(region)
        regions = [{"name": r.name, "times_ms": [round(t, 4) for t in r.times_ms],
                    "median_ms": round(statistics.median(r.times_ms[1:]), 4) if len(r.times_ms) > 1 else None}
                   for r in self.regions]
        path.write_text(json.dumps({"regions": regions}) + "\n", encoding="utf-8")


def ms_per_call(path: Path) -> float | None:
    """A timing run's figure: the sum of its regions' median calls; None when no region was timed."""
    try:
        regions = json.loads(path.read_text(encoding="utf-8"))["regions"]
    except (OSError, ValueError, KeyError):
        return None
    medians = [r["median_ms"] for r in regions if r.get("median_ms") is not None]
    return round(sum(medians), 4) if medians else None
