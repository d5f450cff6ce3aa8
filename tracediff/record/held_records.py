"""Records held back, in order, until their device fingerprints arrive; written while the host waits for the device.

A CUDA tensor's fingerprint is computed on the device in batches (record/fingerprints/device.py): the record
holding it waits here, and writing it is host time the device's queue can hide when the program next waits for
the device (`TraceRecorder.before_host_wait`).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from tracediff.record.fingerprints.device import DeviceFingerprints
from tracediff.record.held_gc import HeldRecordsAllowance
from tracediff.trace.writer import TraceWriter

# Records held back before those that can be written without a host wait are (`HeldRecords.add`, `make_room`):
# four times as many at most, a few MiB.
HELD_RECORDS = 1024

# Container objects (dicts, lists) of a held record, about: the record, its lists, and per tensor its description,
# shape and fingerprint (HeldRecordsAllowance).
_CONTAINERS_PER_RECORD = 16

# Records written between two looks at whether the device is still busy, at a host wait (`write_arrived`).
WRITE_CHUNK = 32


class HeldRecords:
    """The records waiting for device fingerprints, oldest first, each with the count of fingerprints submitted
    to the device when it was made (it can be written once that many have arrived)."""

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer
        self.records: deque[tuple[dict[str, Any], int]] = deque()  # never replaced: the recorder reads it directly
        self._allowance = HeldRecordsAllowance(HELD_RECORDS * _CONTAINERS_PER_RECORD)

    def start_holding(self) -> None:
        """Records are held from now on (the first device fingerprint): keep them from setting off collections."""
        self._allowance.hold()

    def release(self) -> None:
        """The recording ends: the garbage collector's threshold goes back."""
        self._allowance.release()

    def drop(self) -> None:
        """In a forked child: the held records are the parent's to write."""
        self.records.clear()
        self._allowance.release()

    def add(self, record: dict[str, Any], device: DeviceFingerprints | None) -> None:
        """Hold `record` after the others. Past HELD_RECORDS records, those whose fingerprints have arrived are
        written at once (`make_room`)."""
        self.records.append((record, device.submitted if device is not None else 0))
        if len(self.records) > HELD_RECORDS:
            self.make_room(device)

    def write_arrived(self, device: DeviceFingerprints | None, while_busy: bool = False,
                      whole_stream: int | None = None) -> None:
        """Write the held records whose device fingerprints have arrived, in order, without waiting.

        `while_busy`: the program is about to wait for the device; write only while the device still has work
        queued (looked at every WRITE_CHUNK records), and leave the rest for the next wait. Past that point the
        program would be waiting for the recorder, not the device: a batch's records all at once (about 650 per
        batch in GPT-2) took 9 ms at a synchronize where the device had 6.5 ms left.
        `whole_stream`: the CUDA device whose current stream the program's wait is for in full, the batches of
        fingerprints queued there included. Then a record whose batch (on that device) is still on its way waits for
        it, and writing goes on while the device runs the program's work queued after it. Without that, where the device is behind the
        host at a wait (long kernels queued before it), no batch sealed since has arrived, and those records wait
        for a later wait, or are written op by op once too many are held (`make_room`). Written op by op, the
        records of an eager GPT-2 forward took 2.5 ms of its 23.6 ms of host time on the H100.
        """
        busy = device.busy_marker() if while_busy and device is not None else None
        if device is not None:
            device.poll()
        held, write = self.records, self.writer.write
        written = 0
        while held:
            resolved = device.resolved if device is not None else math.inf
            while held and held[0][1] <= resolved:
                write(held.popleft()[0])
                written += 1
                if busy is not None and written % WRITE_CHUNK == 0 and busy.query():
                    return
            if not (held and whole_stream is not None and busy is not None and device is not None
                    and device.read_sealed(whole_stream)):
                return

    def make_room(self, device: DeviceFingerprints | None) -> None:
        """Too many records held (a program that does not wait for the device): write those whose fingerprints
        have arrived, as every op did before records waited for the host's waits. Past four times as many, wait
        for the older half's fingerprints too (the device is then far behind the host)."""
        self.write_arrived(device)
        if device is not None and len(self.records) > 4 * HELD_RECORDS:
            device.wait_for(self.records[len(self.records) // 2][1])
            self.write_arrived(device)

    def write_all(self, device: DeviceFingerprints) -> None:
        """Wait for the device fingerprints and write every record held back for them.

        If the device cannot be read any more (a kernel faulted), the missing
        fingerprints are written as null: the records themselves still stand.
        """
        try:
            device.finish()
        except RuntimeError:
            for record, _ in self.records:
                for tensor in (*record.get("in", ()), *record.get("out", ())):
                    if tensor.get("fp") == {}:
                        tensor["fp"] = None
        while self.records:
            self.writer.write(self.records.popleft()[0])
