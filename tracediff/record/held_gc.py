"""Keeping the records a recording holds from setting off the program's garbage collections."""

from __future__ import annotations

import gc


class HeldRecordsAllowance:
    """Raises the cyclic collector's first threshold by `extra` while a recording holds records, and puts it back.

    CPython collects its youngest generation every 700 net allocations of container objects (dicts, lists). A
    recording with device fingerprints holds each record, a dozen or more containers, until the host waits for
    the device: a GPT-2 forward of 242 records set off about three young collections and a third of an older one
    per call, 0.65 ms of an H200 host's time. The held records are freed at the wait, which brings the count back
    down, so raising the threshold by what they can reach leaves the program's own collections about as they were.
    """

    def __init__(self, extra: int) -> None:
        self.extra = extra
        self._saved: tuple[int, ...] | None = None

    def hold(self) -> None:
        """Raise the threshold (once; a threshold of 0, automatic collection off, is left alone)."""
        if self._saved is not None:
            return
        saved = gc.get_threshold()
        if saved[0] > 0:
            self._saved = saved
            gc.set_threshold(saved[0] + self.extra, *saved[1:])

    def release(self) -> None:
        """Put the threshold back, unless the program has set its own since."""
        saved, self._saved = self._saved, None
        if saved is not None and gc.get_threshold()[0] == saved[0] + self.extra:
            gc.set_threshold(*saved)
