"""Calls outside the dispatcher after which the host waits for the device: a CUDA device's synchronize (through
`torch.cuda.synchronize` or `torch.accelerator.synchronize`) and a CUDA stream's or event's `synchronize()`.

While recording, each of them first calls `before_wait(device)` (the recorder writes the records it held back for
their device fingerprints: the device's queue hides that host time, where writing them op by op would add it to a
host-bound program). `device`: the CUDA device whose current stream the wait covers in full (a device's
synchronize, or the current stream's), so the host may wait for any of the recorder's own work queued there before
it at no cost to the program; None for a wait that may be for less (an event's, another stream's). Inside the
dispatcher the recorder sees such waits itself (`.item()`, a copy to the host). Restored on exit.

A device's synchronize is hooked where torch calls it, `torch._C._cuda_synchronize` and
`torch._C._accelerator_synchronizeDevice`, which `torch.cuda.synchronize` and `torch.accelerator.synchronize` look
up at each call: a program that bound either function before the recording is reached too (unreached, its records
were written op by op once too many were held: 2.5 ms of an eager GPT-2 forward's 23.6 ms of host time on the
H100). A program that bound the `torch._C` function itself, or waits through torch's device-generic
`torch.Stream`/`torch.Event` (C types, which take no hooks), only moves the writing elsewhere.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


def _before(original: Callable[..., Any], before_wait: Callable[[int | None], None],
            waited_device: Callable[..., int | None]) -> Callable[..., Any]:
    @functools.wraps(original)
    def waiting(*args: Any, **kwargs: Any) -> Any:
        before_wait(waited_device(*args, **kwargs))
        return original(*args, **kwargs)

    return waiting


def _current_cuda_device() -> int:
    """`torch._C._cuda_synchronize()` waits for every stream of the current device (`torch.cuda.synchronize(device)`
    makes `device` current around it)."""
    return torch.cuda.current_device()


def _accelerator_device(device_index: int | None = None) -> int | None:
    """The CUDA device `torch._C._accelerator_synchronizeDevice(device_index)` waits for, every stream of it; None
    where the accelerator is not CUDA."""
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type != "cuda":
        return None
    return device_index if device_index is not None and device_index >= 0 else torch.cuda.current_device()


def _current_stream_device(stream: torch.cuda.Stream) -> int | None:
    """The stream's device, where it is that device's current stream."""
    return stream.device_index if stream == torch.cuda.current_stream(stream.device) else None


def _no_device(*_args: Any, **_kwargs: Any) -> None:
    return None


class HostWaits:
    """Calls `before_wait(device)` before each of the program's host waits for a CUDA device, while entered."""

    def __init__(self, before_wait: Callable[[int | None], None]) -> None:
        self.before_wait = before_wait
        self._restore: list[tuple[Any, str, Any]] = []

    def _patch(self, owner: Any, name: str, waited_device: Callable[..., int | None]) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        self._restore.append((owner, name, original))
        setattr(owner, name, _before(original, self.before_wait, waited_device))

    def __enter__(self) -> HostWaits:
        if hasattr(torch._C, "_cuda_synchronize"):  # CUDA builds
            self._patch(torch._C, "_cuda_synchronize", _current_cuda_device)
        if hasattr(torch._C, "_accelerator_synchronizeDevice"):
            self._patch(torch._C, "_accelerator_synchronizeDevice", _accelerator_device)
        self._patch(torch.cuda.Stream, "synchronize", _current_stream_device)
        self._patch(torch.cuda.Event, "synchronize", _no_device)
        return self

    def __exit__(self, *exc: object) -> None:
        while self._restore:
            owner, name, original = self._restore.pop()
            setattr(owner, name, original)
