"""Calls outside the dispatcher after which the host waits for the device: `torch.cuda.synchronize()` and a
CUDA stream's or event's `synchronize()`.

While recording, each of them first calls `before_wait(whole_stream)` (the recorder writes the records it held
back for their device fingerprints: the device's queue hides that host time, where writing them op by op
would add it to a host-bound program). `whole_stream`: the wait is for everything queued on the current stream
(a device's or the current stream's `synchronize()`), so the host may wait for any of the recorder's own work
queued there before it at no cost to the program; an event's wait may be for less. Inside the dispatcher the
recorder sees such waits itself (`.item()`, a copy to the host). Restored on exit; a program that looked the
function up before the recording keeps the original, which only moves the writing elsewhere (op by op, once too
many records are held: 2.5 ms of an eager GPT-2 forward's 23.6 ms of host time on the H100).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


def _before(original: Callable[..., Any], before_wait: Callable[[bool], None],
            whole_stream: Callable[..., bool]) -> Callable[..., Any]:
    @functools.wraps(original)
    def waiting(*args: Any, **kwargs: Any) -> Any:
        before_wait(whole_stream(*args, **kwargs))
        return original(*args, **kwargs)

    return waiting


def _syncs_current_device(device: Any = None) -> bool:
    """`torch.cuda.synchronize(device)` waits for every stream of the current device."""
    return device is None or torch.cuda._utils._get_device_index(device, optional=True) == torch.cuda.current_device()


def _is_current_stream(stream: torch.cuda.Stream) -> bool:
    return stream == torch.cuda.current_stream(stream.device)


def _never(*_args: Any, **_kwargs: Any) -> bool:
    return False


class HostWaits:
    """Calls `before_wait()` before each of the program's host waits for a CUDA device, while entered."""

    def __init__(self, before_wait: Callable[[bool], None]) -> None:
        self.before_wait = before_wait
        self._restore: list[tuple[Any, str, Any]] = []

    def _patch(self, owner: Any, name: str, whole_stream: Callable[..., bool]) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        self._restore.append((owner, name, original))
        setattr(owner, name, _before(original, self.before_wait, whole_stream))

    def __enter__(self) -> HostWaits:
        self._patch(torch.cuda, "synchronize", _syncs_current_device)
        self._patch(torch.cuda.Stream, "synchronize", _is_current_stream)
        self._patch(torch.cuda.Event, "synchronize", _never)
        return self

    def __exit__(self, *exc: object) -> None:
        while self._restore:
            owner, name, original = self._restore.pop()
            setattr(owner, name, original)
