"""Calls outside the dispatcher after which the host waits for the device: `torch.cuda.synchronize()` and a
CUDA stream's or event's `synchronize()`.

While recording, each of them first calls `before_wait` (the recorder writes the records it held back
for their device fingerprints: the device's queue hides that host time, where writing them op by op
would add it to a host-bound program). Inside the dispatcher the recorder sees such waits itself
(`.item()`, a copy to the host). Restored on exit; a program that looked the function up before the
recording keeps the original, which only moves the writing elsewhere.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


def _before(original: Callable[..., Any], before_wait: Callable[[], None]) -> Callable[..., Any]:
    @functools.wraps(original)
    def waiting(*args: Any, **kwargs: Any) -> Any:
        before_wait()
        return original(*args, **kwargs)

    return waiting


class HostWaits:
    """Calls `before_wait()` before each of the program's host waits for a CUDA device, while entered."""

    def __init__(self, before_wait: Callable[[], None]) -> None:
        self.before_wait = before_wait
        self._restore: list[tuple[Any, str, Any]] = []

    def _patch(self, owner: Any, name: str) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        self._restore.append((owner, name, original))
        setattr(owner, name, _before(original, self.before_wait))

    def __enter__(self) -> HostWaits:
        self._patch(torch.cuda, "synchronize")
        self._patch(torch.cuda.Stream, "synchronize")
        self._patch(torch.cuda.Event, "synchronize")
        return self

    def __exit__(self, *exc: object) -> None:
        while self._restore:
            owner, name, original = self._restore.pop()
            setattr(owner, name, original)
