"""The one-pass C statistics for CPU fingerprints (record/fingerprints/host_stats.py): the torch ops' numbers, threads or
not, the non-finite path, and the fallbacks where no compiler builds them."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from tracediff.record.fingerprints import host_stats
from tracediff.record.fingerprints.fingerprint import (
    SKETCH_PERIOD,
    SKETCH_WIDTH,
    Scratch,
    _compiled_stats,
    _torch_stats,
    as_real,
    fingerprint,
    sketch_masks,
    sketch_signs,
)

needs_compiler = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                    reason="no C compiler: fingerprints take the torch ops")

SIZES = [2, 7, 100, SKETCH_PERIOD, SKETCH_PERIOD + 1, 3 * SKETCH_PERIOD, 3 * SKETCH_PERIOD + 11,
         host_stats.THREADS_FROM + 5, 1 << 20]


def _close(compiled: list[float], reference: list[float], rel: float) -> None:
    """Each statistic within `rel` of its scale: l1, the sum of squares and max their own; the sum and the
    sketch, which may cancel to near zero, l1."""
    scale = abs(reference[1]) + 1e-30
    assert len(compiled) == len(reference) == 4 + SKETCH_WIDTH
    for index, (a, b) in enumerate(zip(compiled, reference)):
        bound = rel * (abs(b) if index in (1, 2, 3) else scale)
        assert abs(a - b) <= bound, (index, a, b)


@needs_compiler
def test_the_compiled_statistics_are_built_here() -> None:
    # CI has a compiler: the C path, not the fallback, is what the rest of the suite records with.
    assert _compiled_stats() is not None


@needs_compiler
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_statistics_equal_the_torch_ops(n: int, dtype: torch.dtype) -> None:
    compiled = _compiled_stats()
    assert compiled is not None
    x = (torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3 + 0.5).to(dtype)
    got = compiled.stats(x)
    assert got is not None
    # float32 tensors past one period: the torch ops sum in float32 (a few ulps), the C function in double.
    rel = 1e-5 if dtype == torch.float32 and n > SKETCH_PERIOD else 1e-12
    _close(got, _torch_stats(x, None), rel)
    assert got[3] == x.abs().max().item()  # max is exact either way


@needs_compiler
def test_the_threaded_split_gives_the_single_thread_numbers() -> None:
    compiled = _compiled_stats()
    assert compiled is not None
    x = torch.randn(3_000_017, dtype=torch.float64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = compiled.stats(x)
        torch.set_num_threads(max(2, before))
        several = compiled.stats(x)
    finally:
        torch.set_num_threads(before)
    assert one is not None and several is not None
    _close(several, one, 1e-12)
    assert several[3] == one[3]


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.complex64])
def test_other_dtypes_reach_the_compiled_statistics_through_their_copy(dtype: torch.dtype) -> None:
    x = torch.randn(5000) * 10
    t = x.to(dtype) if dtype != torch.complex64 else torch.complex(x, -x)
    fp = fingerprint(t, scratch=Scratch())
    reference = _torch_stats(as_real(t), None)
    assert fp is not None
    _close([fp["sum"], fp["l1"], fp["l2"] ** 2, fp["max"], *fp["sk"]], reference, 1e-6)


@needs_compiler
@pytest.mark.parametrize("n", [50, 3 * SKETCH_PERIOD + 5, host_stats.THREADS_FROM * 2])
def test_nan_and_inf_take_the_non_finite_path_with_their_counts(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(n)
    x[3], x[n // 2], x[-1] = float("nan"), float("inf"), float("-inf")
    compiled = fingerprint(x)
    monkeypatch.setattr(importlib.import_module("tracediff.record.fingerprints.fingerprint"), "_compiled_stats", lambda: None)
    reference = fingerprint(x)
    assert compiled == reference  # the non-finite path is the torch ops' in both
    assert compiled is not None and (compiled["nan"], compiled["inf"]) == (1, 2)


@needs_compiler
def test_max_of_signed_zeros_subnormals_and_huge_values() -> None:
    compiled = _compiled_stats()
    assert compiled is not None
    tiny = torch.finfo(torch.float32).tiny / 8  # subnormal
    x = torch.tensor([-0.0, tiny, -3.0e38, 2.5, -tiny], dtype=torch.float32)
    stats = compiled.stats(x)
    assert stats is not None and stats[3] == x.abs().max().item()
    assert stats[1] == sum(abs(v) for v in x.tolist())
    zeros = compiled.stats(torch.tensor([-0.0, 0.0, -0.0]))
    assert zeros is not None and zeros[3] == 0.0 and zeros[1] == 0.0


@needs_compiler
def test_a_recording_reads_strided_and_contiguous_tensors_alike() -> None:
    x = torch.randn(64, 300)
    scratch = Scratch()
    assert fingerprint(x.t(), scratch=scratch) == fingerprint(x.t().contiguous(), scratch=scratch)


def _stats_in_child(x: torch.Tensor, queue: multiprocessing.Queue) -> None:
    compiled = _compiled_stats()  # the parent's, inherited
    queue.put(None if compiled is None else compiled.stats(x))  # no torch op here: those hang too (below)


@needs_compiler
def test_a_forked_child_computes_them_without_the_parents_threads() -> None:
    """libgomp is not fork-safe: a child that starts a parallel region after its parent did waits forever on
    threads it does not have. torch's own ops do (a parallel `sum` in the child of a parent that made one hangs,
    on torch 2.13 here), so the recorder's children run their ops one-threaded (DataLoader workers set it);
    the compiled statistics must not start threads there either, whatever `torch.get_num_threads()` says."""
    compiled = _compiled_stats()
    assert compiled is not None
    x = torch.arange(1 << 20, dtype=torch.float32)
    parent = compiled.stats(x)  # the threaded split, in this process: libgomp's pool now exists here
    assert torch.get_num_threads() > 1 or os.cpu_count() == 1
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_stats_in_child, args=(x, queue))
    child.start()
    child.join(timeout=60)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0, "the child hung or died computing statistics after fork"
    got = queue.get(timeout=5)
    assert got is not None and parent is not None
    _close(got, parent, 1e-12)


def test_the_c_functions_sign_bits_are_the_sketchs_signs() -> None:
    """host_stats.c reads the sketch's signs as bits of one int32 per position: bit j set exactly where sign j is +1."""
    masks, signs = sketch_masks(), sketch_signs()
    assert masks.dtype == torch.int32 and masks.shape == (SKETCH_PERIOD,)
    bits = (masks.unsqueeze(1).to(torch.int64) >> torch.arange(SKETCH_WIDTH)) & 1
    assert torch.equal(bits * 2 - 1, signs.to(torch.int64))


def test_torch_ops_when_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEDIFF_HOST_FINGERPRINT", "torch")
    assert host_stats.load(SKETCH_PERIOD, SKETCH_WIDTH, sketch_masks()) is None


def test_no_compiler_means_the_torch_ops(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to run here
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("TRACEDIFF_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(host_stats.BuildError):
        host_stats.build(SKETCH_PERIOD, SKETCH_WIDTH)
    assert host_stats.load(SKETCH_PERIOD, SKETCH_WIDTH, sketch_masks()) is None


def test_a_failing_compiler_means_the_torch_ops(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    failing = tmp_path / "cc"
    failing.write_text("#!/bin/sh\necho 'cc: error: no' >&2\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setenv("CC", str(failing))
    monkeypatch.setenv("TRACEDIFF_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(host_stats.BuildError, match="no"):
        host_stats.build(SKETCH_PERIOD, SKETCH_WIDTH)
    assert host_stats.load(SKETCH_PERIOD, SKETCH_WIDTH, sketch_masks()) is None
    assert not [p for p in (tmp_path / "cache").iterdir() if p.suffix == ".so"]  # nothing half-built left


@needs_compiler
def test_the_cache_builds_once(tmp_path: Path) -> None:
    first = host_stats.build(SKETCH_PERIOD, SKETCH_WIDTH, cache=tmp_path)
    stamp = first.stat().st_mtime_ns
    again = host_stats.build(SKETCH_PERIOD, SKETCH_WIDTH, cache=tmp_path)
    assert again == first and again.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no build directory left behind
    assert os.access(first, os.R_OK)


def test_a_functional_tensor_is_not_read_and_leaves_the_scratch_alone() -> None:
    """AOT autograd traces with FunctionalTensors, and the recorder's mode may see those ops (DDP under
    aot_eager did): reading one traced ops into the graph, and a scratch buffer they touched became a fake
    graph constant ("Unexpected fake buffer _tensor_constant0")."""
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    scratch = Scratch()
    with FunctionalTensorMode():
        wrapped = FunctionalTensor.to_functional(torch.randn(40, 50).t())
        assert isinstance(wrapped, FunctionalTensor)
        assert fingerprint(wrapped, scratch=scratch) is None
    assert scratch._buffers == [None, None]


def _strided_views(dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype)

    wide = randn(4, 128, 768)
    return [
        randn(64, 300).t(),                                       # a transpose, several rows
        wide[..., 256:512],                                       # a split of GPT-2's fused projection
        wide[..., :256].reshape(4, 128, 4, 64).transpose(1, 2),   # its heads
        randn(30_000)[::3],                                       # a stepped slice
        randn(1, 5000).expand(3, 5000),                           # zero strides
        randn(10, 20).t(),                                        # less than one row
        randn(2000, 600).t(),                                     # split over threads
        randn(*[2] * 8, 40).transpose(0, 8)[..., 1:],             # nine dims: copied, not read in place
    ]


@needs_compiler
@pytest.mark.parametrize("index", range(len(_strided_views())))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_strided_view_read_in_place_gives_its_copys_statistics_exactly(index: int, dtype: torch.dtype) -> None:
    compiled = _compiled_stats()
    assert compiled is not None
    view = _strided_views(dtype)[index]
    assert not view.is_contiguous()
    copy = view.contiguous()
    if view.dim() <= host_stats.HostStats.MAX_DIMS:
        assert compiled.reads(view)
        assert compiled.stats(view) == compiled.stats(copy)  # the same rows, in the same order: the same bits
    assert fingerprint(view, scratch=Scratch()) == fingerprint(copy, scratch=Scratch())


@needs_compiler
@pytest.mark.parametrize("n", [40 * SKETCH_PERIOD + 17, 1 << 20])
def test_float32_sums_stay_within_a_few_ulps_of_float64(n: int) -> None:
    """Past one row, float32 tensors are summed in float32 vectors, each float sum short before it joins a double."""
    compiled = _compiled_stats()
    assert compiled is not None
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 2 + 3  # an offset: no cancellation to hide behind
    got = compiled.stats(x)
    assert got is not None
    _close(got, _torch_stats(x.double(), None), 2e-6)
    assert got[3] == x.abs().max().item()


@needs_compiler
def test_the_portable_loop_gives_the_avx2_loops_numbers(tmp_path: Path) -> None:
    import ctypes

    compiled = _compiled_stats()
    assert compiled is not None
    library = ctypes.CDLL(str(host_stats.build(SKETCH_PERIOD, SKETCH_WIDTH, cache=tmp_path, defines=("TRACEDIFF_PORTABLE",))))
    portable = host_stats.HostStats(library, sketch_masks(), SKETCH_WIDTH, threaded=False)
    assert portable.description == "compiled, portable"
    for x in (torch.randn(3 * SKETCH_PERIOD + 100) - 0.5, torch.randn(300, 700).t()):
        ours, theirs = compiled.stats(x), portable.stats(x)
        assert ours is not None and theirs is not None
        _close(theirs, ours, 1e-6)  # the same float sums; fused multiply-adds or not
        assert theirs[3] == ours[3]


def test_a_traces_header_says_how_its_cpu_statistics_were_computed(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Traces of the compiled pass and of the torch ops differ within float32 rounding: the header says which
    (and the diff's header differences show it when two traces differ)."""
    import tracediff
    from tracediff.trace.reader import Trace

    with tracediff.record(tmp_path / "compiled.jsonl"):
        torch.randn(10).sum()
    compiled = _compiled_stats()
    expected = "torch ops" if compiled is None else compiled.description
    assert Trace(tmp_path / "compiled.jsonl").header["host_fingerprints"] == expected
    monkeypatch.setattr(importlib.import_module("tracediff.record.fingerprints.fingerprint"), "_compiled_stats", lambda: None)
    with tracediff.record(tmp_path / "torch.jsonl"):
        torch.randn(10).sum()
    assert Trace(tmp_path / "torch.jsonl").header["host_fingerprints"] == "torch ops"


@needs_compiler
def test_python_threads_fingerprinting_at_once_get_their_own_numbers() -> None:
    """The threads' working memory is kept between calls; a call made while another Python thread's is running
    (ctypes releases the GIL) allocates its own instead of sharing it."""
    import threading

    compiled = _compiled_stats()
    assert compiled is not None
    tensors = [torch.randn(host_stats.THREADS_FROM * 2 + k, generator=torch.Generator().manual_seed(k))
               for k in range(6)]
    expected = [compiled.stats(x) for x in tensors]
    got: dict[int, list[list[float] | None]] = {k: [] for k in range(len(tensors))}

    def work(k: int) -> None:
        for _ in range(20):
            got[k].append(compiled.stats(tensors[k]))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(tensors))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k, results in got.items():
        assert len(results) == 20
        for result in results:
            assert result is not None and expected[k] is not None
            _close(result, expected[k], 1e-12)


@needs_compiler
def test_a_wrapper_subclass_is_never_read_by_its_address(tmp_path: Path) -> None:
    """A DTensor's local shard may be a functional collective's AsyncCollectiveTensor, a wrapper subclass whose data
    pointer is no data (0 here): reading it by address crashed a tensor-parallel run with SIGSEGV. It is read through
    its own ops."""
    from torch.testing._internal.two_tensor import TwoTensor

    import tracediff

    compiled = _compiled_stats()
    assert compiled is not None
    wrapped = TwoTensor(torch.randn(5000), torch.randn(5000))
    assert not compiled.reads(wrapped)
    with tracediff.record(tmp_path / "t.jsonl"):
        (wrapped * 2).sum()  # described, not read by address: the process lives
    assert (tmp_path / "t.jsonl").stat().st_size > 0


@needs_compiler
@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr", "mkldnn", "nested"])
def test_a_tensor_whose_memory_is_not_its_values_in_order_is_not_read_by_address(layout: str) -> None:
    """A sparse, MKLDNN (blocked) or nested tensor's memory is not its values in row-major order: they go through
    their own ops."""
    compiled = _compiled_stats()
    assert compiled is not None
    dense = torch.randn(100, 100)
    make = {"sparse_coo": lambda: dense.to_sparse(), "sparse_csr": lambda: dense.to_sparse_csr(),
            "mkldnn": lambda: dense.to_mkldnn(),
            "nested": lambda: torch.nested.nested_tensor([torch.randn(5000), torch.randn(3000)])}
    if layout == "mkldnn" and not torch.backends.mkldnn.is_available():
        pytest.skip("no MKLDNN in this torch build")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors: a prototype API
        t = make[layout]()
    assert not compiled.reads(t)


def test_a_tensor_whose_storage_was_freed_under_it_is_not_read(tmp_path: Path) -> None:
    """FSDP2 frees a parameter's memory between uses with `untyped_storage().resize_(0)` and keeps the tensor. An op
    that does not read it (a view) is still recorded; reading it for a fingerprint, by the compiled statistics or by
    torch's own ops, would read freed memory (a segfault)."""
    import tracediff
    from tracediff.trace.reader import Trace

    freed = torch.randn(100_000)
    freed.untyped_storage().resize_(0)
    assert not host_stats.memory_holds(freed) and not host_stats.memory_holds(freed.view(1000, 100))
    assert fingerprint(freed, scratch=Scratch()) is None
    compiled = _compiled_stats()
    assert compiled is None or not compiled.reads(freed)
    with tracediff.record(tmp_path / "t.jsonl"):
        freed.view(100, 1000).detach()  # ops that take it without reading it
    ops = {r["op"]: r for r in Trace(tmp_path / "t.jsonl") if r.get("t") == "op"}
    assert ops["aten::view"]["in"][0]["fp"] is None and ops["aten::detach"]["in"][0]["fp"] is None
    freed.untyped_storage().resize_(400_000)  # grown again: read as any tensor
    assert host_stats.memory_holds(freed) and fingerprint(freed, scratch=Scratch()) is not None


def test_a_recorded_tensor_with_nan_is_counted_by_torch_ops_the_recording_does_not_see(tmp_path: Path) -> None:
    import tracediff
    from tracediff.trace.reader import Trace

    x = torch.randn(3 * SKETCH_PERIOD)
    x[5], x[7] = float("nan"), float("inf")
    with tracediff.record(tmp_path / "t.jsonl"):
        y = x * 2
    records = [r for r in Trace(tmp_path / "t.jsonl") if r.get("t") == "op"]
    assert [r["op"] for r in records] == ["aten::mul.Tensor"]  # the counting ops are not the program's
    out = records[0]["out"][0]["fp"]
    assert (out["nan"], out["inf"], out["n"]) == (1, 1, 3 * SKETCH_PERIOD)
    assert out == fingerprint(y)
