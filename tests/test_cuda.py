"""The same fixtures on an NVIDIA GPU: Triton kernels recorded, faults localized, clean models match.

Skipped where CUDA is absent (CI). Run on a GPU machine with:
    python -m pytest -q -m cuda tests/test_cuda.py
Results from such a run are recorded in docs/cuda.md.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import TRACES_ONLY, marker_line

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA)"),
]

ON_GPU = ("--", "--device", "cuda")


def test_wrong_decomposition_on_cuda(run_fixture) -> None:
    result = run_fixture("wrong_decomposition.py", "eager,wrong_decomposition:wrong_cos_backend", *ON_GPU)
    first = result.report["first_divergence"]
    assert result.exit_code == 1
    assert first["op"] == "aten::cos"
    assert first["source"] == f"wrong_decomposition.py:{marker_line('wrong_decomposition.py', 'divergent line')}"


def test_perturbed_fusion_on_cuda_is_pinned(run_fixture) -> None:
    result = run_fixture("perturbed_fusion.py", "eager,inductor", TRACES_ONLY, *ON_GPU)
    first = result.report["first_divergence"]
    assert result.exit_code == 1, result.stdout
    assert first["op"] == "aten::cos"
    assert first["source"] == f"perturbed_fusion.py:{marker_line('perturbed_fusion.py', 'divergent line')}"
    assert first["narrowing"]["result"] == "pinned"


def test_perturbed_fusion_on_cuda_is_named_on_its_own_inputs(run_fixture) -> None:
    result = run_fixture("perturbed_fusion.py", "eager,inductor", *ON_GPU)
    first = result.report["first_divergence"]
    assert result.exit_code == 1, result.stdout
    assert (first["op"], first["pinned_by"]) == ("aten::cos", "same_inputs")
    assert first["source"] == f"perturbed_fusion.py:{marker_line('perturbed_fusion.py', 'divergent line')}"


def test_triton_kernels_are_recorded_with_fused_ops(run_fixture) -> None:
    from tests.conftest import invoke

    report = run_fixture("perturbed_fusion.py", "eager,inductor", "--no-narrow", TRACES_ONLY, *ON_GPU).report
    first = report["first_divergence"]
    assert {"aten::sin", "aten::cos"} <= {c["op"] for c in first["candidates"]}
    assert first["b"]["op"].startswith("triton_")
    shown = invoke("show", report["traces"][1])
    assert any(" kernel triton_" in line and "aten::cos" in line for line in shown.stdout.splitlines())


@pytest.mark.parametrize("fixture", ["clean_transformer.py", "clean_cnn.py", "clean_mlp.py"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_clean_models_match_on_cuda(run_fixture, fixture: str, backend: str) -> None:
    result = run_fixture(fixture, f"eager,{backend}", *ON_GPU)
    assert result.exit_code == 0, result.stdout
    assert result.report["verdict"] == "match"


def test_repro_of_a_fused_triton_kernel_reproduces_on_cuda(run_fixture, tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import invoke

    run = run_fixture("perturbed_fusion.py", "eager,inductor", "--no-narrow", TRACES_ONLY, *ON_GPU)
    made = invoke("repro", run.report["run_dir"], "--out-dir", str(tmp_path), "--format", "json")
    assert made.exit_code == 1, made.stderr
    assert made.report["verdict"] == "reproduced" and made.report["check"]["control_returncode"] == 0
    loaded = torch.load(Path(made.report["inputs"]), weights_only=True)
    assert all(t.is_cuda for t in loaded.values())  # captured where the run ran
    on_cpu = subprocess.run([sys.executable, "repro.py", "--device", "cpu", "--backend", "eager"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert on_cpu.returncode == 0, on_cpu.stdout + on_cpu.stderr


def _mlp_on_cuda() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).cuda()
    return model, torch.randn(32, 64, device="cuda")


def test_recording_makes_no_host_sync_per_op(tmp_path) -> None:
    """Every fingerprint stays on the device until the session ends: torch's sync
    debug mode, set to raise, sees no synchronizing call while ops are recorded."""
    import tracediff
    from tracediff.trace.reader import read_trace

    model, x = _mlp_on_cuda()
    model(x)
    torch.cuda.synchronize()
    with tracediff.record(tmp_path / "t.jsonl") as session:
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(10):
                x = model(x).tanh()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        device = session.recorder.device_fingerprints
        assert device is not None and device.submitted >= 40  # each op's output at least: ten rounds of four ops
        assert device.fetches == 0 and device.resolved == 0  # fewer than a batch: read only at the end
    assert device.fetches == 1 and not device.pending
    _, records = read_trace(tmp_path / "t.jsonl")
    assert len(records) >= 50
    assert all(t["fp"] and "sum" in t["fp"] for r in records for t in r["out"])


def test_fingerprints_are_read_in_batches(tmp_path) -> None:
    """Thousands of ops: one read per batch of fingerprints, not one per op."""
    import tracediff
    from tracediff.record.fingerprints.device import BATCH
    from tracediff.record.fingerprints.fingerprint import fingerprint

    x = torch.randn(1000, device="cuda")
    with tracediff.record(tmp_path / "t.jsonl") as session:
        for _ in range(1500):
            x = torch.sin(x) * 1.5
        last = x.clone()
    device = session.recorder.device_fingerprints
    assert device.submitted >= 3000
    assert device.fetches <= device.submitted // BATCH + 1
    from tracediff.trace.reader import read_trace

    _, records = read_trace(tmp_path / "t.jsonl")
    recorded = records[-1]["out"][0]["fp"]
    host = fingerprint(last.cpu())
    assert recorded["n"] == host["n"] and recorded["nan"] == host["nan"] == 0
    for key in ("sum", "l1", "l2", "max"):
        assert abs(recorded[key] - host[key]) <= 1e-5 * host["l1"], key


def test_held_records_are_written_when_the_program_waits_for_the_device(tmp_path) -> None:
    """Records wait for their batch of fingerprints and are written when the program next waits for the GPU
    (`.item()`, a copy to the host, `torch.cuda.synchronize()`), not op by op."""
    import tracediff

    x = torch.randn(1000, device="cuda")
    with tracediff.record(tmp_path / "t.jsonl") as session:
        for _ in range(600):  # one full batch of fingerprints, sealed and on its way
            x = torch.sin(x)
        torch.cuda._sleep(200_000_000)  # the batch arrives; the device stays busy longer than the writing takes
        assert session.writer.records == 0
        x.sum().item()
        after_item = session.writer.records
        assert after_item >= 500
        for _ in range(600):
            x = torch.cos(x)
        assert session.writer.records == after_item
        x.cpu()
        after_copy = session.writer.records
        assert after_copy > after_item
        for _ in range(600):
            x = torch.sin(x)
        torch.cuda.synchronize()
        assert session.writer.records > after_copy


def test_held_records_set_off_no_young_collections_and_the_threshold_comes_back(tmp_path) -> None:
    """While records wait for their device fingerprints, the collector's first threshold is raised by what they
    can reach (record/held_gc.py): a forward's worth of held records sets off no collection of the youngest
    generation, and the threshold is the program's again after the recording."""
    import gc

    import tracediff

    before = gc.get_threshold()
    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    x = torch.randn(1000, device="cuda")
    with tracediff.record(tmp_path / "t.jsonl"):
        x = torch.sin(x)
        torch.cuda.synchronize()
        gc.collect()
        gc.callbacks.append(count)
        try:
            for _ in range(300):  # 300 records held, a dozen or more containers each
                x = torch.sin(x)
        finally:
            gc.callbacks.remove(count)
        assert gc.get_threshold()[0] > before[0]
    assert gc.get_threshold() == before
    assert collections == []


def test_a_wait_writes_held_records_while_the_device_is_busy_and_no_longer(tmp_path) -> None:
    """At a host wait the recorder writes held records only while the device still has work queued: where the
    device is idle already, writing them all would make the program wait for the recorder. It then writes one
    chunk and leaves the rest held for the next wait (or the end); with the device busy it writes them all."""
    import tracediff
    from tracediff.record.held_records import WRITE_CHUNK
    from tracediff.trace.reader import read_trace

    x = torch.randn(1000, device="cuda")
    raw_synchronize = torch._C._cuda_synchronize  # bound before the recording hooks it
    with tracediff.record(tmp_path / "t.jsonl") as session:
        for _ in range(700):  # more than one batch of fingerprints: the first one is sealed
            x = torch.sin(x)
        raw_synchronize()  # the device is idle (no wait hook)
        session.recorder.before_host_wait()
        written = session.writer.records
        assert 0 < written <= WRITE_CHUNK
        torch.cuda._sleep(200_000_000)
        session.recorder.before_host_wait()
        assert session.writer.records >= 500
    _, records = read_trace(tmp_path / "t.jsonl")
    assert [r["i"] for r in records] == list(range(len(records))) and len(records) >= 700


def test_a_wait_for_the_whole_stream_waits_for_a_batch_on_its_way_while_the_device_is_busy(tmp_path) -> None:
    """A host-bound program's device catches up with the host only at its waits, so at a wait a batch of
    fingerprints may not have arrived yet. Where the wait is for the whole stream (`torch.cuda.synchronize()`), the
    recorder waits for a sealed batch and writes its records while the device runs the program's later work; at an
    event's wait (which may be for less) it writes only what has arrived, without waiting for the device.

    Deterministic (issue 48): how much has arrived at the event's wait depends on how fast the host recorded the
    700 ops, so that case is checked by what does not depend on it: the call returns while the program's later
    work (a long sleep queued after the batch) still runs, so it waited for none of it."""
    import tracediff
    from tracediff.trace.reader import read_trace

    x = torch.randn(1000, device="cuda")
    stream = torch.cuda.current_stream()
    with tracediff.record(tmp_path / "t.jsonl") as session:
        for whole_stream in (None, torch.cuda.current_device()):
            torch.cuda._sleep(1_000_000_000)  # the device is behind the host: the batch sealed next is not there yet
            for _ in range(700):  # more than one batch of fingerprints: one is sealed
                x = torch.sin(x)
            torch.cuda._sleep(4_000_000_000)  # the program's work queued after the batch: about two seconds
            before = session.writer.records
            session.recorder.before_host_wait(whole_stream=whole_stream)
            written = session.writer.records - before
            assert not stream.query()  # returned with the program's later work still running: never waited for it
            if whole_stream is not None:
                assert written >= 500  # a sealed batch's records, waited for and written
            torch.cuda.synchronize()
    _, records = read_trace(tmp_path / "t.jsonl")
    assert [r["i"] for r in records] == list(range(len(records))) and len(records) >= 1400
    assert all(t["fp"] and "sum" in t["fp"] for r in records for t in r["out"])


@pytest.mark.parametrize("how", ["bound before", "accelerator"])
def test_a_synchronize_bound_before_the_recording_or_the_accelerators_writes_held_records(tmp_path, how) -> None:
    """`torch.cuda.synchronize` looked up before the recording (`from torch.cuda import synchronize` at a module's
    import), and `torch.accelerator.synchronize()`, reach the hook where torch calls the device's synchronize: the
    held records are written there, with the device busy, as at `torch.cuda.synchronize()`."""
    import tracediff

    synchronize = torch.cuda.synchronize if how == "bound before" else torch.accelerator.synchronize
    x = torch.randn(1000, device="cuda")
    with tracediff.record(tmp_path / "t.jsonl") as session:
        for _ in range(700):  # more than one batch of fingerprints: one is sealed
            x = torch.sin(x)
        torch.cuda._sleep(200_000_000)  # the device is busy while the records are written
        before = session.writer.records
        synchronize()
        assert session.writer.records - before >= 500


@pytest.mark.parametrize("values", [
    [1.0, float("nan"), float("inf"), -float("inf"), 2.0],
    [float("nan")] * 3,
    list(range(-5000, 5000)),
])
def test_triton_and_torch_device_fingerprints_agree(values) -> None:
    from tracediff.record.fingerprints.device import DeviceFingerprints
    from tracediff.record.fingerprints.fingerprint import fingerprint

    t = torch.tensor(values, dtype=torch.float32, device="cuda")
    triton_fps = DeviceFingerprints()
    assert triton_fps.uses_triton
    # The first launch compiles through Triton's JIT, later ones call the compiled kernel directly.
    repeats = [triton_fps.submit(t) for _ in range(3)]
    triton_fps.finish()
    a = repeats[0]
    assert repeats[1] == repeats[2] == a
    import os

    os.environ["TRACEDIFF_DEVICE_FINGERPRINT"] = "torch"
    try:
        torch_fps = DeviceFingerprints()
    finally:
        del os.environ["TRACEDIFF_DEVICE_FINGERPRINT"]
    b = torch_fps.submit(t)
    torch_fps.finish()
    host = fingerprint(t.cpu())
    assert not torch_fps.uses_triton
    for fp in (a, b):
        assert (fp["nan"], fp["inf"], fp["n"]) == (host["nan"], host["inf"], host["n"])
        for key in ("sum", "l1", "l2", "max"):
            assert abs(fp[key] - host[key]) <= 1e-6 * max(host["l1"], 1.0), (key, fp, host)


def test_fingerprint_kernel_is_launched_directly_after_the_first_time() -> None:
    """The host cost per fingerprint is what limits CUDA recording: the JIT's launch path is taken
    once per specialization, then the compiled kernel is called directly (no fallback taken)."""
    from unittest import mock

    from tracediff.record.fingerprints import kernel as fingerprint_kernel
    from tracediff.record.fingerprints.device import _STATS

    launcher = fingerprint_kernel.Launcher()
    out = torch.zeros((4, 8, _STATS), dtype=torch.float64, device="cuda")  # a row per tensor, as the recorder's
    x = torch.randn(5000, device="cuda")
    launcher(x, out, 0)
    with mock.patch.object(fingerprint_kernel, "_partial_stats") as jit:
        launcher(x, out, 1)
        launcher(x, out, 2)
    assert not jit.mock_calls and launcher._one._direct
    torch.cuda.synchronize()
    assert torch.equal(out[0], out[1]) and torch.equal(out[1], out[2])
    assert out[0, :, 0].sum().item() == pytest.approx(x.double().sum().item(), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("n", [1, 4098, 4099, 4100, 3 * 4099 + 5, 1 << 20])
def test_the_kernel_reads_each_float_dtype_as_it_is_and_matches_the_host(dtype, n) -> None:
    """The kernel owns columns of the sketch's period (the fold): sizes around one period and many, and
    half-precision tensors read without a float32 copy, all agree with the host's fingerprint."""
    from tracediff.record.fingerprints.device import DeviceFingerprints
    from tracediff.record.fingerprints.fingerprint import fingerprint

    t = (torch.randn(n, device="cuda") * 3 + 0.5).to(dtype)
    t[n // 2] = float("nan")
    device = DeviceFingerprints()
    fp = device.submit(t)
    device.finish()
    host = fingerprint(t.cpu())
    assert (fp["nan"], fp["inf"], fp["n"]) == (host["nan"], host["inf"], host["n"])
    for key in ("sum", "l1", "l2", "max"):
        assert abs(fp[key] - host[key]) <= 1e-6 * max(host["l1"], 1.0), (key, fp[key], host[key])
    assert max(abs(a - b) for a, b in zip(fp["sk"], host["sk"])) <= 1e-5 * max(host["l2"], 1.0)


@pytest.mark.parametrize("make", [
    lambda: torch.arange(-3000, 9000, device="cuda") * 7,  # int64, more than a period
    lambda: torch.randint(-50, 50, (300,), device="cuda", dtype=torch.int32),
    lambda: torch.rand(5000, device="cuda") > 0.3,  # bool
    lambda: torch.randn(700, dtype=torch.complex64, device="cuda"),
])
def test_integer_bool_and_complex_tensors_are_read_by_the_kernel_and_match_the_host(make) -> None:
    """They go to the kernel as `as_real`'s floats (integers' float64 copy), not through a dozen torch ops: one
    launch, and the host's fingerprint (integers' sums exactly: every partial sum is an integer below 2**53)."""
    from unittest import mock

    from tracediff.record.fingerprints.device import DeviceFingerprints
    from tracediff.record.fingerprints.fingerprint import fingerprint

    t = make()
    device = DeviceFingerprints()
    with mock.patch("tracediff.record.fingerprints.device._torch_partials") as torch_ops:
        fp = device.submit(t)
        device.finish()
    assert not torch_ops.mock_calls
    host = fingerprint(t.cpu())
    assert (fp["nan"], fp["inf"], fp["n"]) == (host["nan"], host["inf"], host["n"])
    exact = not (t.is_complex() or t.is_floating_point())
    for key in ("sum", "l1", "l2", "max"):
        assert fp[key] == host[key] if exact and key != "l2" else abs(fp[key] - host[key]) <= 1e-6 * max(host["l1"], 1.0)
    assert max(abs(a - b) for a, b in zip(fp["sk"], host["sk"])) <= (0 if exact else 1e-5 * max(host["l2"], 1.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_kernel_counts_subnormal_values_and_signed_zeros_as_the_host_does(dtype) -> None:
    """The kernel takes |x|'s maximum on float32 bits and tests for NaN and Inf in float32: a tensor of values
    below float32's smallest normal one (which a float32 `maximum` may flush to zero), negative zeros, NaN and
    Inf gets the host's maximum exactly, its counts, and its sums."""
    from tracediff.record.fingerprints.device import DeviceFingerprints
    from tracediff.record.fingerprints.fingerprint import fingerprint

    tiny = torch.tensor([1e-40, -3e-39, 7e-42, -0.0, 0.0], dtype=torch.float64)
    t = tiny.repeat(2000).to(dtype).to("cuda")  # 10000 elements: more than a period, rows across programs
    t[4321], t[8765], t[9000] = float("nan"), float("-inf"), float("inf")
    device = DeviceFingerprints()
    fp = device.submit(t)
    device.finish()
    host = fingerprint(t.cpu())
    assert host["max"] > 0.0
    assert (fp["max"], fp["nan"], fp["inf"], fp["n"]) == (host["max"], host["nan"], host["inf"], host["n"])
    for key in ("sum", "l1", "l2"):
        assert abs(fp[key] - host[key]) <= 1e-6 * host["l1"], (key, fp[key], host[key])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_one_launch_for_many_tensors_gives_the_same_bits_as_one_launch_each(dtype) -> None:
    """`Launcher.many` fingerprints up to eight tensors in one launch from their addresses (unaligned
    ones too: a view at an odd offset): each tensor's partials, hence its fingerprint, are the bits a
    launch of its own gives, so traces recorded either way compare the same. Its second launch is
    direct (no JIT)."""
    from unittest import mock

    from tracediff.record.fingerprints import kernel as fingerprint_kernel
    from tracediff.record.fingerprints.device import _STATS, PROGRAMS

    launcher = fingerprint_kernel.Launcher()
    sizes = [1, 4098, 4099, 4100, 3 * 4099 + 5, 1 << 20, 77777, 6]
    base = torch.randn(sum(sizes) + 1, device="cuda").to(dtype)
    xs, start = [], 1  # start at element 1: not 16-byte aligned
    for n in sizes:
        xs.append(base[start:start + n])
        start += n
    xs[2][5] = float("nan")
    xs[3][7] = float("inf")
    alone = torch.zeros((len(xs), PROGRAMS, _STATS), dtype=torch.float64, device="cuda")
    together = torch.zeros_like(alone)
    for row, x in enumerate(xs):
        launcher(x, alone, row)
    launcher.many(xs[:5], [0, 1, 2, 3, 4], together, launcher.stream(xs[0].get_device()))
    with mock.patch.object(fingerprint_kernel, "_partial_stats_many") as jit:
        launcher.many(xs[5:], [5, 6, 7], together, launcher.stream(xs[0].get_device()))
    assert not jit.mock_calls and launcher._many._direct
    torch.cuda.synchronize()
    assert torch.equal(alone, together)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("make", [
    lambda dtype: torch.randn(50257, 768, device="cuda").to(dtype).t(),  # GPT-2's tied lm_head weight, as inductor reads it
    lambda dtype: torch.randn(8, 512, 12, 64, device="cuda").to(dtype).permute(0, 2, 1, 3),  # attention heads
    lambda dtype: torch.randn(8, 512, 2304, device="cuda").to(dtype)[:, :, 768:1536],  # k of a fused projection
    lambda dtype: torch.randn(64, 1, 4099, device="cuda").to(dtype).expand(64, 5, 4099),  # stride 0
    lambda dtype: torch.randn(3 * 100003, device="cuda").to(dtype)[1::3],  # one dimension, unaligned
])
def test_a_strided_view_read_in_place_gives_the_bits_of_its_contiguous_copy(make, dtype) -> None:
    """The kernel reads a large strided view by its layout, in logical order (one to four dimensions after
    merging, each read with only the divisions it needs): the partials are those of a launch on its contiguous
    copy, bit for bit (traces compare the same either way), and reading it takes no device memory beyond the
    batch buffer."""
    from tracediff.record.fingerprints import kernel as fingerprint_kernel
    from tracediff.record.fingerprints.device import _STATS, PROGRAMS, strided_layout

    t = make(dtype)
    layout = strided_layout(t.shape, t.stride())
    assert layout is not None and not t.is_contiguous()
    launcher = fingerprint_kernel.Launcher()
    out = torch.zeros((2, PROGRAMS, _STATS), dtype=torch.float64, device="cuda")
    launcher(t, out, 0, layout=layout)  # compiles
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    launcher(t, out, 0, layout=layout)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() == before
    launcher(t.contiguous(), out, 1)
    torch.cuda.synchronize()
    assert torch.equal(out[0], out[1])


def test_the_queue_waits_through_writes_elsewhere_and_launches_before_a_write_to_a_queued_tensor() -> None:
    """A write to other memory (a generated kernel's fresh output) leaves the queue waiting, so one launch
    serves several kernels; a write to a queued tensor's memory (a buffer inductor reuses, through another
    tensor of its storage) launches the queue first: the fingerprint is the value before the write."""
    from tracediff.record.fingerprints.device import DeviceFingerprints
    from tracediff.record.fingerprints.fingerprint import fingerprint

    device = DeviceFingerprints()
    if not device.uses_triton:
        pytest.skip("the queue is the Triton launcher's")
    buffer = torch.randn(2, 4096, device="cuda")
    expected = fingerprint(buffer.cpu())
    fp = device.submit(buffer)
    elsewhere = torch.empty(4096, device="cuda")
    device.before_op([elsewhere])
    assert device._queue is not None and device._queue.tensors[0] is buffer
    reused = torch._C._dynamo.guards._reinterpret_tensor(buffer, (4096,), (1,), 4096)  # a kernel's alias of it
    device.before_op([reused])
    assert device._queue is not None and device._queue.tensors == []  # launched; an empty queue stays open
    reused.zero_()
    device.finish()
    assert abs(fp["l1"] - expected["l1"]) <= 1e-5 * expected["l1"] and fp["sk"] != [0.0] * len(fp["sk"])


def test_queued_fingerprints_are_launched_on_the_stream_their_tensors_were_made_on(tmp_path) -> None:
    """`y` is made on a side stream and waits in the queue. The program has the default stream wait for
    it, keeps the side stream busy, then zeroes `y` on the default stream. The queued launch goes to the
    side stream (where `y` is made), behind the busy work, and the default stream must wait for it
    before the write, or it reads zeros."""
    import tracediff
    from tracediff.record.fingerprints.fingerprint import fingerprint
    from tracediff.trace.reader import read_trace

    x = torch.randn(4096, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with tracediff.record(tmp_path / "t.jsonl"):
        with torch.cuda.stream(side):
            y = torch.sin(x)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # not an op: the side stream is busy for about 0.1 s
        y.mul_(0.0)
        torch.cuda.synchronize()
    _, records = read_trace(tmp_path / "t.jsonl")
    sin = next(r for r in records if r["op"] == "aten::sin")
    expected = fingerprint(torch.sin(x).cpu())
    assert abs(sin["out"][0]["fp"]["l1"] - expected["l1"]) <= 1e-5 * expected["l1"]


# The GPU modes people use (issue 48), each a user's script in fixtures/: (fixture, its arguments, needs transformers).
GPU_MODES = [
    ("cudagraphs_forward.py", (), True),
    ("gpu/cudagraphs_grad_accum.py", (), False),
    ("gpu/cudagraphs_checkpoint_dropout.py", (), False),
    ("gpu/manual_cuda_graph.py", (), False),
    ("gpu/max_autotune.py", (), False),
    ("gpu/fp16_grad_scaler.py", (), False),
    ("fused_adamw_train.py", (), True),
    ("gpu/compiled_optimizer_step.py", (), False),
    ("gpu/compiled_optimizer_step.py", ("--fused",), False),
    ("gpu/flex_attention_causal.py", (), False),
    ("gpu/sdpa_backends.py", ("--sdpa", "flash"), False),
    ("gpu/sdpa_backends.py", ("--sdpa", "efficient"), False),
    ("gpu/sdpa_backends.py", ("--sdpa", "cudnn"), False),
    ("gpu/channels_last_cnn.py", (), False),
    ("gpu/dynamic_seq_lengths.py", (), False),
    ("gpu/hf_train_bf16.py", ("--model", "gpt2"), True),
    ("gpu/hf_train_bf16.py", ("--model", "llama", "--pure-bf16"), True),
    ("gpu/hf_train_bf16.py", ("--model", "bert"), True),
]


@pytest.mark.parametrize(("fixture", "args", "transformers"), GPU_MODES,
                         ids=[" ".join((f, *a)) for f, a, _ in GPU_MODES])
def test_gpu_modes_match_with_every_compiled_call_judged(run_fixture, fixture: str, args: tuple[str, ...],
                                                         transformers: bool) -> None:
    """Each script matches plainly (eager and inductor print the same numbers); recorded, it must complete, match,
    and have every compiled call (and its backward) judged on its own inputs. Before: CUDA graphs read static
    outputs before their replay and failed the program on tensors held in their pool, flex_attention raised in the
    recorder, the float64 reference had no attention kernel under `sdpa_kernel`, and fused attention's unwritten
    dropout state was compared."""
    if transformers:
        pytest.importorskip("transformers")
    result = run_fixture(fixture, "eager,inductor", "--", *args)
    report = result.report
    assert result.exit_code == 0 and report["verdict"] == "match", result.stdout[-3000:]
    same = report["same_inputs"]
    assert same["calls"] > 0 and same["unjudged"] == 0, same
    drift = report.get("drift") or {}
    assert "attention" not in str(drift.get("op")), drift  # a fused attention's scratch outputs are not values


def test_fused_adamw_matches_by_the_trace_rules_too(run_fixture) -> None:
    """H200, GPT-2 with AdamW(fused=True): without the same-input judge, the trace rules said DIVERGED at the
    embedding's add, reading a fused kernel's buffer as the hidden state: `_fused_adamw_` wrote every weight
    unread. Its writes are fingerprinted now."""
    pytest.importorskip("transformers")
    result = run_fixture("fused_adamw_train.py", "eager,inductor", "--no-same-inputs")
    assert result.exit_code == 0 and result.report["verdict"] == "match", result.stdout[-3000:]


@pytest.mark.parametrize("fixture", ["gpu/cudagraphs_train_batches.py", "gpu/manual_cuda_graph.py"])
def test_each_cuda_graph_replay_is_read_as_a_new_value(run_fixture, fixture: str) -> None:
    """H200, a new batch each step: a replay writes the static memory of its outputs without a version bump, and the
    recorder filed each later read under the first replay's fingerprint. By the trace rules alone the compiled
    region's output then differed from eager's from the third step on (`diverged`, though the losses agreed), and a
    graph made by hand fed the same stale value to the compiled head for each batch."""
    from tracediff.trace.reader import read_trace

    result = run_fixture(fixture, "eager,inductor", TRACES_ONLY)
    assert result.exit_code == 0 and result.report["verdict"] == "match", result.stdout[-3000:]
    _, records = read_trace(result.report["traces"][1])
    # The compiled region's output after each replay (trees), or the compiled head's input read from it (by hand).
    side, event = ("out", "exit") if "train" in fixture else ("in", "enter")
    seen = [r[side][0] for r in records if r["t"] == "region" and r["ev"] == event]
    assert len(seen) >= 3 and len({t["fp"]["l2"] for t in seen}) == len(seen), seen  # each batch its own value
