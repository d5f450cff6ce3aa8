"""Deferred (batched) fingerprints: the machinery CUDA recordings use, exercised on CPU tensors.

On CUDA the statistics travel through pinned memory and events (tests/test_cuda.py);
the batching, the placeholders and the recorder's held-back records are the same.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

import tracediff
from tracediff.record.fingerprints import device as device_fingerprints
from tracediff.record.fingerprints.device import DeviceFingerprints, _torch_partials
from tracediff.record.fingerprints.fingerprint import fingerprint
from tracediff.record.mode import TraceRecorder
from tracediff.trace.reader import Trace, read_trace

TENSORS = [
    torch.randn(1000),
    torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 2.0]),
    torch.full((4,), float("nan")),
    torch.arange(6, dtype=torch.int64),
    torch.tensor([True, False, True]),
    torch.tensor([1 + 2j, -3 - 4j], dtype=torch.complex64),
    torch.empty(0, 3),
    torch.ones(5, dtype=torch.bfloat16),
    torch.randn(4, 6).t(),
    torch.randn(300, dtype=torch.float64),
]


def _close(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if {k: a[k] for k in ("nan", "inf", "n")} != {k: b[k] for k in ("nan", "inf", "n")}:
        return False
    return all(math.isclose(a[k], b[k], rel_tol=1e-6, abs_tol=1e-6 * max(b["l1"], 1e-30)) for k in ("sum", "l1", "l2", "max"))


def test_deferred_fingerprints_match_host_ones_after_the_batch_is_read() -> None:
    device = DeviceFingerprints(batch=3, programs=4)
    placeholders = [device.submit(t) for t in TENSORS]
    nonempty = [t for t in TENSORS if t.numel()]
    assert device.submitted == len(nonempty)
    assert device.resolved == 0  # nothing read yet: full batches are sealed, read when polled
    device.poll()
    assert device.resolved == device.fetches * 3 == len(nonempty) // 3 * 3
    device.finish()
    assert device.resolved == device.submitted and not device.pending
    for t, fp in zip(TENSORS, placeholders):
        assert _close(fp, fingerprint(t)), (t, fp, fingerprint(t))


def test_placeholder_is_empty_until_its_batch_is_read() -> None:
    device = DeviceFingerprints(batch=2, programs=2, in_flight=8)
    first = device.submit(torch.ones(3))
    assert first == {} and device.pending
    device.submit(torch.ones(3))  # fills the batch: sealed, and on CPU it is there at once
    device.poll()
    assert first["sum"] == 3.0 and first["n"] == 3


class _DeferringRecorder(TraceRecorder):
    """Sends CPU tensors down the device path, in small batches, to test the held-back records."""

    def _fingerprint(self, t: torch.Tensor) -> dict[str, Any] | None:
        if self.exact:
            return super()._fingerprint(t)
        if self.device_fingerprints is None:
            self.device_fingerprints = DeviceFingerprints(batch=4, programs=3, in_flight=2)
        return self.device_fingerprints.submit(t)


class _DeferredTorchLauncher:
    """Stands in for the Triton launcher on CPU: `many` computes when it is called, so a tensor written
    after it was queued and before its launch gets the wrong fingerprint, as it would on a GPU."""

    slots = 3

    def __init__(self) -> None:
        self.launches: list[int] = []  # tensors per `many` launch
        self.layouts: list[Any] = []  # the layout of each launch of one tensor (None: flat memory)

    def stream(self, device: int) -> int:
        return 0

    def takes_many(self, out: torch.Tensor) -> bool:
        return True

    def __call__(self, x: torch.Tensor, out: torch.Tensor, row: int, stream: int | None = None,
                 layout: Any = None) -> None:
        self.layouts.append(layout)
        if layout is not None:  # read by the layout, as the kernel does
            assert not x.is_contiguous()
            (s1, s2, s3), strides = layout
            x = torch.as_strided(x, (x.numel() // (s1 * s2 * s3), s1, s2, s3), strides, x.storage_offset())
        _torch_partials(x.reshape(-1), out[row])

    def many(self, xs: list[torch.Tensor], rows: list[int], out: torch.Tensor, stream: int) -> None:
        self.launches.append(len(xs))
        for x, row in zip(xs, rows):
            _torch_partials(x.reshape(-1), out[row])


def _queueing(device: DeviceFingerprints, monkeypatch: pytest.MonkeyPatch) -> _DeferredTorchLauncher:
    """`device` with its float tensors queued for `_DeferredTorchLauncher`, as CUDA tensors are for Triton."""
    launcher = _DeferredTorchLauncher()
    device._launch = launcher  # type: ignore[assignment]
    monkeypatch.setattr(device_fingerprints, "_kernel_reads", lambda t: t.dtype in device_fingerprints._KERNEL_DTYPES)
    return launcher


def _submitted(tensors: list[torch.Tensor], batch: int, fast: bool,
               monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[Any], list[bool], int]:
    """Fingerprint `tensors` in order on a queueing DeviceFingerprints of `batch` rows, trying the queue's fast entry
    first where `fast` (as the recorder does), else `submit` only: the queue launches, the fingerprints, which
    tensors the fast entry took, and how many took a slot."""
    device = DeviceFingerprints(batch=batch, programs=4)
    launcher = _queueing(device, monkeypatch)
    fingerprints, taken = [], []
    for t in tensors:
        fp = device.submit_to_queue(t) if fast else None
        taken.append(fp is not None)
        fingerprints.append(fp if fp is not None else device.submit(t))
    device.finish()
    return launcher.launches, fingerprints, taken, device.submitted


def test_queued_tensors_are_launched_together_by_dtype_and_count(monkeypatch: pytest.MonkeyPatch) -> None:
    device = DeviceFingerprints(batch=64, programs=4)
    launcher = _queueing(device, monkeypatch)
    tensors = [torch.randn(50) for _ in range(4)] + [torch.randn(7, dtype=torch.float64)] + [torch.arange(5)]
    placeholders = [device.submit(t) for t in tensors]
    assert launcher.launches == [3, 1]  # a full queue; the 4th waits, then goes when a float64 comes
    big = torch.randn(device_fingerprints.QUEUE_BYTES // 4 + 1)
    placeholders.append(device.submit(big))  # too big to hold: launched alone, the queue left as it was
    assert launcher.launches == [3, 1]
    device.finish()  # the float64 one and the integers' float64 copy are launched before the batch is reduced
    assert launcher.launches == [3, 1, 2]
    for t, fp in zip([*tensors, big], placeholders):
        assert _close(fp, fingerprint(t)), t


def test_the_queues_fast_entry_takes_only_what_submit_would_queue_and_gives_the_same_fingerprints(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`submit_to_queue` (the recorder tries it first for plain CUDA tensors) takes a tensor into the open queue
    as `submit` would (a small strided view as its contiguous copy), and declines everything else, which `submit`
    then takes: no open queue, another dtype, a negated view, a tensor that would fill the batch. Either way the
    launches and the fingerprints are the same."""
    torch.manual_seed(0)
    tensors = [torch.randn(50), torch.randn(60), torch.randn(7, dtype=torch.float64),
               torch.randn(9, dtype=torch.float64), torch.randn(5, dtype=torch.float64),
               torch.randn(10, 10).t(), torch.randn(8, 8)[:, :4], torch.randn(40),
               torch.randn(20), torch._neg_view(torch.randn(20))]

    launches, fingerprints, _, _ = _submitted(tensors, 5, False, monkeypatch)
    fast_launches, fast_fingerprints, taken, _ = _submitted(tensors, 5, True, monkeypatch)
    # t0 opens the queue, t1 joins; a float64 opens another, and one more joins; the fifth would fill the batch;
    # a new batch's first tensor (a transpose) finds no queue; a strided view joins as its copy; t7 joins and fills
    # the queue's three slots; their launch leaves an empty queue open, which t8 joins; a negated view is declined.
    assert taken == [False, True, False, True, False, False, True, True, True, False]
    assert fast_launches == launches
    assert fast_fingerprints == fingerprints


def test_the_queues_fast_entry_launches_a_queue_too_full_to_join_and_answers_empty_tensors_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor that does not fit beside the queued ones launches them and opens the next queue, as `submit` does
    (GPT-2's 50 MB activations each fill most of a queue); an empty tensor of any dtype or layout gets the empty
    fingerprint without a slot. The launches and fingerprints are `submit`'s."""
    monkeypatch.setattr(device_fingerprints, "QUEUE_BYTES", 600)
    torch.manual_seed(0)
    tensors = [torch.randn(50), torch.randn(100), torch.empty(0), torch.randn(100), torch.empty(8, 0, 3).transpose(0, 2),
               torch.empty(0, dtype=torch.int64), torch.randn(160)]

    launches, fingerprints, _, submitted = _submitted(tensors, 64, False, monkeypatch)
    fast_launches, fast_fingerprints, taken, fast_submitted = _submitted(tensors, 64, True, monkeypatch)
    # t0 opens the queue (200 bytes), t1 joins (600); t3 launches both and opens the next, launched at the end;
    # t6 (640 bytes) is more than a queue holds: launched alone by `submit` (not a queue's launch).
    assert taken == [False, True, True, True, True, True, False]
    assert fast_launches == launches == [2, 1]
    assert fast_fingerprints == fingerprints and fast_submitted == submitted == 4
    for t, fp in zip(tensors, fast_fingerprints):
        assert _close(fp, fingerprint(t)), t


def test_the_queues_fast_entry_leaves_a_large_strided_view_to_its_own_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A strided view past STRIDED_READ_BYTES is read in place by a launch of its own (`submit`), not copied into
    the queue; a smaller one joins as its copy. The launches and fingerprints are `submit`'s."""
    monkeypatch.setattr(device_fingerprints, "STRIDED_READ_BYTES", 100)
    torch.manual_seed(0)
    tensors = [torch.randn(10), torch.randn(8, 8)[:, :4], torch.randn(20), torch.randn(8, 8)[:, :2]]

    launches, fingerprints, _, _ = _submitted(tensors, 64, False, monkeypatch)
    fast_launches, fast_fingerprints, taken, _ = _submitted(tensors, 64, True, monkeypatch)
    assert taken == [False, False, True, True]  # 128 bytes strided: its own launch; 64 bytes: copied and queued
    assert fast_launches == launches
    assert fast_fingerprints == fingerprints
    for t, fp in zip(tensors, fast_fingerprints):
        assert _close(fp, fingerprint(t)), t


def test_the_queues_fast_entry_declines_a_tensor_whose_storage_was_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    """FSDP2 frees a parameter's memory between uses (`untyped_storage().resize_(0)`) and keeps the tensor; the
    kernel would read freed device memory. The fast entry declines it, and the recorder's other path does not read
    it either (`has_data`)."""
    device = DeviceFingerprints(batch=64, programs=4)
    _queueing(device, monkeypatch)
    device.submit(torch.randn(50))  # opens the queue
    freed = torch.randn(50)
    freed_view = freed.view(5, 10)[:, :4]
    freed.untyped_storage().resize_(0)
    assert device.submit_to_queue(freed) is None
    assert device.submit_to_queue(freed_view) is None  # strided: copying it would read the freed memory
    assert device.submit_to_queue(torch.randn(50)) is not None  # a tensor with its memory joins as before
    device.finish()


def test_the_recorder_launches_queued_fingerprints_before_a_write(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`y` waits in the queue when `add_` and `resize_` come: each must launch it first, or its recorded
    fingerprint is of the value written after it (or of freed memory)."""

    class Recorder(TraceRecorder):
        def _fingerprint(self, t: torch.Tensor) -> dict[str, Any] | None:
            if self.device_fingerprints is None:
                self.device_fingerprints = DeviceFingerprints(batch=64, programs=3)
                _queueing(self.device_fingerprints, monkeypatch)
            return self.device_fingerprints.submit(t)

    import importlib

    monkeypatch.setattr(importlib.import_module("tracediff.record.session"), "TraceRecorder", Recorder)
    x = torch.randn(100)
    with tracediff.record(tmp_path / "t.jsonl"):
        y = x * 2
        y.add_(1.0)
        z = x + 3  # z's storage shrinks to nothing and grows again before its fingerprint could be launched
        z.untyped_storage().resize_(0)
        z.untyped_storage().resize_(400)
        z.fill_(0.0)
    _, records = read_trace(tmp_path / "t.jsonl")
    by_op = {r["op"]: r for r in records}
    assert _close(by_op["aten::mul.Tensor"]["out"][0]["fp"], fingerprint(x * 2))
    assert _close(by_op["aten::add_.Tensor"]["out"][0]["fp"], fingerprint(x * 2 + 1))
    assert _close(by_op["aten::add.Tensor"]["out"][0]["fp"], fingerprint(x + 3))


def test_the_queue_waits_through_writes_elsewhere_and_launches_before_a_write_to_a_queued_tensor(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`sin(x, out=fresh)` writes memory nothing queued lives in: the queue keeps waiting, so one launch serves
    more ops. `y[:50].zero_()` writes `y`'s memory through a view: `y` is launched first."""
    launchers: list[_DeferredTorchLauncher] = []

    class Recorder(TraceRecorder):
        def _fingerprint(self, t: torch.Tensor) -> dict[str, Any] | None:
            if self.device_fingerprints is None:
                self.device_fingerprints = DeviceFingerprints(batch=64, programs=3)
                launchers.append(_queueing(self.device_fingerprints, monkeypatch))
                launchers[0].slots = 8
            return self.device_fingerprints.submit(t)

    import importlib

    monkeypatch.setattr(importlib.import_module("tracediff.record.session"), "TraceRecorder", Recorder)
    x, fresh = torch.randn(100), torch.empty(100)
    with tracediff.record(tmp_path / "t.jsonl"):
        y = x * 2
        torch.sin(x, out=fresh)
        y[:50].zero_()
        launches = list(launchers[0].launches)
    assert launches == [4]  # x, y, fresh and the view of y, launched together before the write to y
    _, records = read_trace(tmp_path / "t.jsonl")
    by_op = {r["op"]: r for r in records}
    assert _close(by_op["aten::mul.Tensor"]["out"][0]["fp"], fingerprint(x * 2))
    assert _close(by_op["aten::sin.out"]["out"][0]["fp"], fingerprint(torch.sin(x)))
    assert by_op["aten::zero_"]["out"][0]["fp"]["l1"] == 0.0


def test_the_queue_takes_a_tensor_it_cannot_place_in_memory_as_sharing_it() -> None:
    """A write to a tensor whose memory is not told by a plain storage (a sparse tensor, a subclass such as
    DTensor, whose local tensor may be the queued one) launches the queue first."""

    class Wrapped(torch.Tensor):
        pass

    queued = torch.randn(8)
    queue = device_fingerprints._Queue(0, 0, torch.float32, [queued], [0], 32, [device_fingerprints._storage_span(queued)])
    assert queue.overlaps(queued[2:]) and not queue.overlaps(torch.randn(8))
    assert queue.overlaps(torch.randn(8).to_sparse())
    assert queue.overlaps(torch.randn(8).as_subclass(Wrapped))


def test_the_queue_works_out_spans_when_asked_and_sees_tensors_queued_after_it_was_asked() -> None:
    """Spans are worked out at the first `overlaps` (most queues are launched before any op writes); a tensor
    queued after that question is still seen by the next one."""
    first, second, third = torch.randn(8), torch.randn(8), torch.randn(8)
    queue = device_fingerprints._Queue(0, 0, torch.float32, [first], [0], 32, [])
    assert not queue.overlaps(second) and queue.overlaps(first[4:])
    queue.tensors.append(second)
    queue.rows.append(1)
    assert queue.overlaps(second[1:]) and not queue.overlaps(third)
    assert len(queue.spans) == 2


@pytest.mark.parametrize("make", [
    lambda: torch.randn(7, 5).t(),  # a transposed weight
    lambda: torch.randn(2, 6, 5, 3).permute(0, 2, 1, 3),  # attention heads
    lambda: torch.randn(4, 9, 12)[:, :, 4:8],  # a split of a fused projection
    lambda: torch.randn(3, 1, 5).expand(3, 4, 5),  # a broadcast: stride 0
    lambda: torch.randn(2, 1, 3, 4, 5)[:, :, :, :, 1:4],  # size 1 dropped, then neighbours merged
    lambda: torch.randn(4, 6, 10)[1:3, ::2, 3:],
    lambda: torch.randn(2, 3, 4, 5, 6).permute(4, 3, 2, 1, 0),  # five dimensions that no merge reduces
])
def test_the_strided_layout_reads_a_view_in_logical_order(make) -> None:
    """The Triton kernel reads a large strided view in place through `strided_layout`: index i of the
    fingerprint is element (i // (s1 s2 s3), i // (s2 s3) % s1, i // s3 % s2, i % s3) of a 4-d tensor with
    strides t0..t3 from the view's first element, which must be the view's i-th element in logical order
    (what its contiguous copy holds), or the fingerprint would change meaning."""
    t = make()
    layout = device_fingerprints.strided_layout(t.shape, t.stride())
    if t.dim() == 5 and t.stride()[-1] != 1 and t.shape[1] != 1:
        assert layout is None  # the kernel takes at most four: a contiguous copy is read instead
        return
    assert layout is not None
    (s1, s2, s3), strides = layout
    as_read = torch.as_strided(t, (t.numel() // (s1 * s2 * s3), s1, s2, s3), strides, t.storage_offset())
    assert torch.equal(as_read.reshape(-1), t.reshape(-1))


def test_a_large_strided_view_is_read_in_place_and_a_small_one_copied_and_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    """A strided view past STRIDED_READ_BYTES (inductor's `reinterpret_tensor` of a tied embedding, 147 MiB for
    GPT-2's lm_head) goes to a launch of its own with its layout, without a contiguous copy; a smaller one is
    copied and waits in the queue. Either way its fingerprint is its value's."""
    monkeypatch.setattr(device_fingerprints, "STRIDED_READ_BYTES", 1 << 20)  # 64 MiB as shipped: a smaller test
    device = DeviceFingerprints(batch=64, programs=4)
    launcher = _queueing(device, monkeypatch)
    large = torch.randn(512, device_fingerprints.STRIDED_READ_BYTES // 4 // 512 + 1).t()
    small = torch.randn(40, 30).t()
    placeholders = [device.submit(large), device.submit(small)]
    assert launcher.layouts == [device_fingerprints.strided_layout(large.shape, large.stride())]
    assert launcher.launches == []  # `small`'s copy is queued
    device.finish()
    assert launcher.launches == [1] and launcher.layouts[0] is not None
    for t, fp in zip([large, small], placeholders):
        assert _close(fp, fingerprint(t)) and fp["sk"] == pytest.approx(fingerprint(t)["sk"], rel=1e-5, abs=1e-4)


def _program(x: torch.Tensor, fail: bool = False) -> torch.Tensor:
    w = torch.randn(8, 8)
    h = torch.relu(x @ w)
    h.mul_(2.0)  # in place: the input's value before, the new version after
    h = h.t().contiguous()
    for _ in range(5):
        h = torch.tanh(h) + 1.0
    if fail:
        raise ValueError("boom")
    return h.sum()


def _record(path: Path, deferred: bool, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> None:
    if deferred:
        import importlib

        monkeypatch.setattr(importlib.import_module("tracediff.record.session"), "TraceRecorder", _DeferringRecorder)
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    try:
        with tracediff.record(path):
            _program(x, fail)
    except ValueError:
        pass
    monkeypatch.undo()


def test_deferred_recording_writes_the_same_records_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _record(tmp_path / "host.jsonl", False, monkeypatch)
    _record(tmp_path / "deferred.jsonl", True, monkeypatch)
    _, host = read_trace(tmp_path / "host.jsonl")
    _, deferred = read_trace(tmp_path / "deferred.jsonl")
    assert [r["i"] for r in deferred] == list(range(len(deferred)))
    assert [(r["op"], len(r["in"]), len(r["out"])) for r in deferred] == [(r["op"], len(r["in"]), len(r["out"])) for r in host]
    compared = 0
    for a, b in zip(host, deferred):
        for ta, tb in zip(a["in"] + a["out"], b["in"] + b["out"]):
            assert (ta["id"], ta["v"]) == (tb["id"], tb["v"])
            assert (ta["fp"] is None) == (tb["fp"] is None)
            if ta["fp"] is not None:
                assert _close(tb["fp"], ta["fp"]), (a["op"], ta, tb)
                # The transpose's output: its input's statistics less the sketch, also while those are on their way.
                assert set(tb["fp"]) == set(ta["fp"]), (a["op"], ta, tb)
                compared += 1
    assert compared > 20
    assert any("sk" not in t["fp"] for r in deferred if r["op"] == "aten::t" for t in r["out"])


def test_deferred_records_are_written_when_the_script_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _record(tmp_path / "t.jsonl", True, monkeypatch, fail=True)
    trace = Trace(tmp_path / "t.jsonl")
    records = list(trace)
    assert trace.failed and trace.failed["type"] == "ValueError"
    assert sum(r["op"] == "aten::tanh" for r in records) == 5
    assert all(t["fp"] and "sum" in t["fp"] for r in records for t in r["out"])


def test_held_records_are_written_when_the_host_waits_for_the_device(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Records waiting for device fingerprints are written at the program's next wait for the device (its
    queue hides that host time), not op by op; past HELD_RECORDS, those whose fingerprints arrived."""
    import importlib

    from tracediff.record import held_records

    waits: list[int] = []
    # No CUDA here: the function `torch.cuda.synchronize()` calls, on device 0.
    monkeypatch.setattr(torch._C, "_cuda_synchronize", lambda: waits.append(1), raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    original = torch._C._cuda_synchronize
    monkeypatch.setattr(importlib.import_module("tracediff.record.session"), "TraceRecorder", _DeferringRecorder)
    monkeypatch.setattr(held_records, "HELD_RECORDS", 40)
    x = torch.randn(4, 8)
    with tracediff.record(tmp_path / "t.jsonl") as session:
        for _ in range(6):
            x = torch.tanh(x) + 1.0
        assert session.writer.records == 0 and len(session.recorder._held) == 12
        torch._C._cuda_synchronize()  # batches of four: the first eight records' fingerprints have arrived
        assert waits == [1] and session.writer.records >= 8
        for _ in range(60):
            x = torch.tanh(x) + 1.0
        assert len(session.recorder._held) <= 40
    assert torch._C._cuda_synchronize is original  # restored
    _, records = read_trace(tmp_path / "t.jsonl")
    assert [r["i"] for r in records] == list(range(132))
    assert all(t["fp"] and "sum" in t["fp"] for r in records for t in r["out"])


def test_each_wait_for_the_device_names_the_device_whose_current_stream_it_waits_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A device's synchronize is hooked where `torch.cuda.synchronize` and `torch.accelerator.synchronize` call it, so a
    program that bound either before the recording is reached too. Each wait names the CUDA device whose current
    stream it covers in full (the recorder may then wait for its own batches there); an event's wait, None."""
    from tracediff.record.host_waits import HostWaits

    calls: list[tuple[str, tuple]] = []
    monkeypatch.setattr(torch._C, "_cuda_synchronize", lambda: calls.append(("cuda", ())), raising=False)
    monkeypatch.setattr(torch._C, "_accelerator_synchronizeDevice", lambda *a: calls.append(("accelerator", a)))
    monkeypatch.setattr(torch.cuda.Event, "synchronize", lambda self: calls.append(("event", ())))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: torch.device("cuda"))
    bound_before = torch._C._accelerator_synchronizeDevice
    waits: list[int | None] = []
    with HostWaits(waits.append):
        torch._C._cuda_synchronize()  # as `torch.cuda.synchronize()` calls it, with the device it syncs made current
        torch._C._accelerator_synchronizeDevice(-1)  # `torch.accelerator.synchronize()`: the current device
        torch._C._accelerator_synchronizeDevice(1)
        torch.cuda.Event.synchronize(object())  # type: ignore[arg-type]
    assert waits == [2, 2, 1, None]
    assert calls == [("cuda", ()), ("accelerator", (-1,)), ("accelerator", (1,)), ("event", ())]
    assert torch._C._accelerator_synchronizeDevice is bound_before  # restored
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: None)  # no CUDA accelerator: no device
    with HostWaits(waits.append):
        torch._C._accelerator_synchronizeDevice(0)
    assert waits[-1] is None


def test_waiting_for_a_fingerprint_seals_the_open_batch_that_holds_it() -> None:
    device = DeviceFingerprints(batch=8, programs=3)
    placeholders = [device.submit(torch.full((5,), float(i))) for i in range(3)]
    device.wait_for(0)
    assert device.resolved == 0 and placeholders[1] == {}
    device.wait_for(2)
    assert device.resolved == 3 and placeholders[1]["sum"] == 5.0 and device.fetches == 1


def test_a_batch_read_while_waiting_for_another_keeps_the_order() -> None:
    """Waiting for a batch's event runs the host-wait hooks, which read arrived batches themselves (`poll`) and
    write the records whose fingerprints `resolved` says are filled: it must never count a later batch before
    an earlier one is filled."""
    device = DeviceFingerprints(batch=2, programs=3, in_flight=8)
    placeholders: list[dict[str, Any]] = []
    unfilled_but_resolved: list[int] = []
    hooking = [False]

    class Event:
        def __init__(self) -> None:
            self.done = False

        def query(self) -> bool:
            return self.done

        def synchronize(self) -> None:  # as record/host_waits.py's hook, which does not re-enter itself
            if hooking[0]:
                return
            hooking[0] = True
            try:
                for batch in device._sealed:
                    batch.event.done = True
                device.poll()
                unfilled_but_resolved.extend(i for i in range(device.resolved) if not placeholders[i])
            finally:
                hooking[0] = False

    for i in range(6):
        placeholders.append(device.submit(torch.full((3,), float(i))))
        if device._sealed and device._sealed[-1].event is None:
            device._sealed[-1].event = Event()
    assert len(device._sealed) == 3 and device.resolved == 0
    device.wait_for(1)
    assert unfilled_but_resolved == []
    assert device.resolved == 6 and device.fetches == 3
    assert [p["sum"] for p in placeholders] == [3.0 * i for i in range(6)]
