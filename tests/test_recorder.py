"""The recorder, in-process: what one record holds, and what it must not change."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import tracediff
from tracediff.trace.reader import read_trace

HERE = Path(__file__).name


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.act = torch.nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h = torch.cos(h)  # the cos line
        return self.act(h)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x).sum()


def _ops(path: Path) -> list[dict]:
    _, records = read_trace(path)
    return [r for r in records if r["t"] == "op"]


def _line_of(marker: str) -> int:
    for number, line in enumerate(Path(__file__).read_text().splitlines(), start=1):
        if marker in line and "_line_of" not in line:
            return number
    raise AssertionError(marker)


def test_op_records_carry_module_source_and_fingerprints(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = Net()
    with tracediff.record(tmp_path / "t.jsonl"):
        net(torch.randn(2, 4))
    cos = next(r for r in _ops(tmp_path / "t.jsonl") if r["op"] == "aten::cos")
    assert cos["m"] == "Net.block"
    assert cos["src"] == f"{HERE}:{_line_of('# the cos line')}"
    assert cos["code"].startswith("h = torch.cos(h)")
    (inp,), (out,) = cos["in"], cos["out"]
    assert inp["dt"] == "float32" and inp["sh"] == [2, 4] and inp["dev"] == "cpu"
    assert set(out["fp"]) >= {"sum", "l1", "l2", "max", "nan", "inf"}
    gelu = next(r for r in _ops(tmp_path / "t.jsonl") if r["op"] == "aten::gelu")
    assert gelu["m"] == "Net.block.act"
    assert gelu["in"][0]["id"] == out["id"]  # dataflow: cos feeds gelu


def test_ctc_losss_log_alpha_is_scratch_past_the_input_lengths(tmp_path: Path) -> None:
    """`_ctc_loss` keeps log_alpha for its backward, written only up to each sequence's input length: garbage
    past it, which eager and compiled runs of a padded batch recorded differently (a false DIVERGED, found by
    bench/real_programs/ctc_speech.py). It is marked uninitialized; the loss is not."""
    torch.manual_seed(0)
    log_probs = torch.randn(20, 2, 5).log_softmax(-1)
    targets = torch.randint(1, 5, (2, 4))
    with tracediff.record(tmp_path / "t.jsonl"):
        torch.nn.functional.ctc_loss(log_probs, targets, torch.tensor([20, 9]), torch.tensor([4, 2]))
    _, records = read_trace(tmp_path / "t.jsonl")
    (ctc,) = [r for r in records if r.get("op", "").startswith("aten::_ctc_loss")]
    assert [bool(t.get("uninit")) for t in ctc["out"]] == [False, True], ctc["out"]


def test_source_is_user_code_not_torch(tmp_path: Path) -> None:
    with tracediff.record(tmp_path / "t.jsonl"):
        torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3))  # linear line
    matmuls = [r for r in _ops(tmp_path / "t.jsonl") if r["op"] in ("aten::mm", "aten::addmm")]
    assert matmuls, "linear recorded no mm/addmm: nothing was checked"
    for record in matmuls:
        assert record["src"] == f"{HERE}:{_line_of('# linear line')}"
        assert "torch" not in record["path"].split("/")[-2:]


def test_inplace_ops_see_inputs_before_and_outputs_after(tmp_path: Path) -> None:
    with tracediff.record(tmp_path / "t.jsonl"):
        x = torch.zeros(3)
        x.add_(1)
        y = x * 2
        torch.add(y, 1, out=x)
    zeros, add_, mul, add_out = _ops(tmp_path / "t.jsonl")
    assert add_["in"][0]["fp"]["sum"] == 0.0 and add_["out"][0]["fp"]["sum"] == 3.0
    assert mul["in"][0]["fp"]["sum"] == 3.0
    assert add_["out"][0]["v"] == mul["in"][0]["v"]  # dataflow keys (id, version) line up
    out_buffer = next(t for t in add_out["in"] if t["a"] == "out")
    assert out_buffer["fp"] is None  # an out= buffer's old contents mean nothing
    assert add_out["out"][0]["fp"]["sum"] == 9.0




def test_a_tensor_an_inplace_foreach_op_wrote_is_read_as_a_new_value(tmp_path: Path) -> None:
    """AdamW's foreach step (the default on CUDA) writes the weights with ops that return nothing, and
    under a dispatch mode torch leaves their version counters alone: a later read must not name the
    value from before the write (whose record agreed), or the diff takes the new weights for the old."""
    with tracediff.record(tmp_path / "t.jsonl"):
        weights = [torch.zeros(3), torch.ones(2)]
        before = weights[1].sum()
        torch._foreach_add_(weights, [torch.ones(3), torch.ones(2)])
        after = weights[1].sum()
    ops = _ops(tmp_path / "t.jsonl")
    first, second = [r for r in ops if r["op"] == "aten::sum"]
    assert first["in"][0]["id"] == second["in"][0]["id"] and first["in"][0]["v"] != second["in"][0]["v"]
    assert second["in"][0]["fp"]["sum"] == 4.0 and (float(before), float(after)) == (2.0, 4.0)
    # The foreach op names what it wrote, fingerprinted as the values it left, so the diff knows who made the
    # value and compares it there; the later read finds that fingerprint.
    (foreach,) = [r for r in ops if r["op"].startswith("aten::_foreach_add_")]
    written = {(t["id"], t["v"]) for t in foreach["out"]}
    assert (second["in"][0]["id"], second["in"][0]["v"]) in written and len(written) == 2
    assert [t["fp"]["sum"] for t in foreach["out"]] == [3.0, 4.0]
    assert not any(t.get("unread") for t in foreach["out"])


def test_an_inplace_list_op_that_bumps_the_counters_itself_names_what_it_wrote(tmp_path: Path) -> None:
    """H200, GPT-2 training step with AdamW's foreach step (bench seed 13, g3n7): CUDA's foreach kernels bump
    the version counters of the tensors they write before the dispatch mode sees the op return, so the
    recorder listed none of the weights `_foreach_addcdiv_` wrote, and the weights read afterwards had no
    producer: the report said a program input differed. A list op that bumps the counters itself (as those
    kernels do) names each tensor it wrote, at the value the counter now names."""
    library = torch.library.Library("tracediff_test", "FRAGMENT")
    library.define("bump_all_(Tensor(a!)[] xs) -> ()")

    def bump_all_(xs: list[torch.Tensor]) -> None:
        for x in xs:
            x.add_(1)
        torch.autograd.graph.increment_version(xs)  # what CUDA's foreach kernels do, before the op returns

    library.impl("bump_all_", bump_all_, "CPU")
    weights = [torch.zeros(3), torch.ones(2)]
    with tracediff.record(tmp_path / "t.jsonl"):
        torch.ops.tracediff_test.bump_all_(weights)
        weights[1].sum()
    ops = _ops(tmp_path / "t.jsonl")
    (bump,) = [r for r in ops if r["op"].startswith("tracediff_test::bump_all_")]
    (read,) = [r for r in ops if r["op"] == "aten::sum"]
    assert [t["fp"]["sum"] for t in bump["out"]] == [3.0, 4.0]
    assert (read["in"][0]["id"], read["in"][0]["v"]) in {(t["id"], t["v"]) for t in bump["out"]}


def test_a_detached_tensor_is_a_value_of_the_tensor_it_was_detached_from(tmp_path: Path) -> None:
    """`p.detach()` shares p's storage and version counter without being a view: a later read of it (a
    script saving its updated weights) is p's value at that version, made by whatever last wrote p."""
    weight = torch.nn.Parameter(torch.zeros(3))
    with tracediff.record(tmp_path / "t.jsonl"):
        with torch.no_grad():
            weight.add_(1)
        detached = weight.detach()
        detached.sum()
        with torch.no_grad():
            weight.mul_(2)
        detached.sum()
    add_, detach, first, mul_, second = _ops(tmp_path / "t.jsonl")
    owner = add_["out"][0]["id"]
    assert detach["out"][0]["b"] == owner and first["in"][0]["b"] == owner
    assert first["in"][0]["v"] == add_["out"][0]["v"] and second["in"][0]["v"] == mul_["out"][0]["v"]
    assert second["in"][0]["fp"]["sum"] == 6.0

def test_a_detached_tensor_stays_a_value_of_its_owner_after_the_owner_is_gone(tmp_path: Path) -> None:
    """The benchmark's training script saves `p.detach()` of each weight and reads them after the model is
    gone: the read named no owner and the version torch counts (not the foreach writes counted on the
    owner), so it matched no record's output, and a clean CPU run with AdamW(foreach=True) under inductor
    said "a program input differs"."""
    with tracediff.record(tmp_path / "t.jsonl"):
        weights = [torch.nn.Parameter(torch.zeros(3))]
        detached = weights[0].detach()
        with torch.no_grad():
            torch._foreach_add_(weights, [torch.ones(3)])
        del weights
        gc.collect()
        detached.sum()
    ops = _ops(tmp_path / "t.jsonl")
    (foreach,) = [r for r in ops if r["op"].startswith("aten::_foreach_add_")]
    (read,) = [r for r in ops if r["op"] == "aten::sum"]
    written = foreach["out"][0]
    assert read["in"][0]["b"] == written["id"] and read["in"][0]["v"] == written["v"], (read["in"], written)


def test_views_name_their_base_and_a_write_through_one_is_a_value_of_the_base(tmp_path: Path) -> None:
    with tracediff.record(tmp_path / "t.jsonl"):
        h = torch.zeros(2, 3)
        v = h.view(-1)
        v[torch.tensor([1, 4])] = torch.tensor([5.0, 7.0])
        h.sum()
    zeros, view, *_, index_put, total = _ops(tmp_path / "t.jsonl")
    assert view["op"] == "aten::view" and index_put["op"] == "aten::index_put_"
    h_id = zeros["out"][0]["id"]
    assert "b" not in zeros["out"][0]
    assert index_put["in"][0]["id"] == view["out"][0]["id"] and index_put["in"][0]["b"] == h_id
    written = index_put["out"][0]
    assert written["b"] == h_id
    # h is read at the version the write through the view made: (base id, version) names that value.
    assert (total["in"][0]["id"], total["in"][0]["v"]) == (h_id, written["v"])
    assert total["in"][0]["fp"]["sum"] == 12.0


def test_uninitialized_outputs_are_marked(tmp_path: Path) -> None:
    with tracediff.record(tmp_path / "t.jsonl"):
        torch.empty(5)
    (empty,) = _ops(tmp_path / "t.jsonl")
    assert empty["out"][0]["uninit"] is True


def test_storage_regrown_outside_the_dispatcher_reads_as_garbage_until_written(tmp_path: Path) -> None:
    """FSDP2 frees a parameter's storage with `resize_(0)` and re-allocates it with `resize_(n)` (no op, no
    version bump) before an all-gather writes it: read in between, it is garbage and a new value."""
    weight = torch.ones(4)
    with tracediff.record(tmp_path / "t.jsonl"):
        weight.mul(2)  # the value as written
        weight.untyped_storage().resize_(0)
        weight.untyped_storage().resize_(16)
        weight.view(2, 2)  # read before written: garbage
        weight.copy_(torch.full((4,), 3.0))
        weight.mul(2)
    assert torch.UntypedStorage.resize_ is torch._C.StorageBase.resize_  # the wrapper is gone
    read_before, garbage_view, copy, read_after = (r for r in _ops(tmp_path / "t.jsonl") if r["op"] != "aten::full")
    assert garbage_view["in"][0]["uninit"] is True and garbage_view["in"][0]["v"] == read_before["in"][0]["v"] + 1
    assert not copy["out"][0].get("uninit") and not read_after["in"][0].get("uninit")
    assert read_after["in"][0]["fp"]["sum"] == 12.0


def test_a_deep_copys_new_storage_is_garbage_until_its_copy_fills_it(tmp_path: Path) -> None:
    """`deepcopy` (an SWA or EMA copy of a model) allocates a storage outside the dispatcher and fills it with the
    storage's own `copy_`, through `set_` onto it: that `set_` reads the allocator's leftovers, which differ between
    runs (`fused_adam_swa`: a false `diverged` at `AveragedModel(model)`); the copy's value is the program's."""
    import copy

    weight = torch.arange(32.0)
    with tracediff.record(tmp_path / "t.jsonl"):
        copied = copy.deepcopy(weight)
        copied.mul(2)
    assert torch.UntypedStorage.copy_ is torch._C.StorageBase.copy_  # the wrapper is gone
    ops = _ops(tmp_path / "t.jsonl")
    fresh, source = (r for r in ops if r["op"] == "aten::set_.source_Storage")
    assert fresh["out"][0]["uninit"] is True and not source["out"][0].get("uninit")
    storage_copy = next(r for r in ops if r["op"] == "aten::copy_")
    assert storage_copy["in"][0]["id"] == fresh["out"][0]["id"] and not storage_copy["out"][0].get("uninit")
    assert ops[-1]["in"][0]["fp"]["sum"] == float(weight.sum())


def test_batch_norms_running_statistics_written_in_training_are_new_values(tmp_path: Path) -> None:
    """Eager train-mode BatchNorm updates its running mean and variance inside `native_batch_norm`, whose schema
    does not mark them written, and torch's version counter does not count it: a later read (an SWA copy of the
    buffers, `fused_adam_swa`) was filed under the value before the update. In eval mode they are only read."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3)
    x = torch.randn(8, 3) + 2.0
    with tracediff.record(tmp_path / "t.jsonl"):
        bn(x)
        bn.running_mean.clone()  # read after the update
        bn.eval()
        bn(x)
    ops = _ops(tmp_path / "t.jsonl")
    train, evaluation = (r for r in ops if r["op"] == "aten::native_batch_norm")
    read = next(r for r in ops if r["op"] == "aten::clone")
    written_mean = next(o for o in train["out"] if o["a"] == "running_mean")
    assert read["in"][0]["v"] == written_mean["v"]
    assert read["in"][0]["fp"]["sum"] == pytest.approx(float(bn.running_mean.sum()))
    assert {o["a"] for o in evaluation["out"]}.isdisjoint({"running_mean", "running_var"})


def test_empty_filled_a_slice_at_a_time_reads_as_garbage_until_every_slice_is_written(tmp_path: Path) -> None:
    """CPU's `affine_grid` writes each channel of an `empty` base grid through a `select`, and selects the next
    channel from the whole base in between: that read sees the allocator's leftovers in the channels not yet
    written (issue 13: a false DIVERGED under aot_eager, trace-only). Each write's own value is still compared."""
    with tracediff.record(tmp_path / "t.jsonl"):
        grid = torch.empty(2, 3)
        for channel in range(3):
            grid.select(1, channel).copy_(torch.full((2,), float(channel)))
        grid.sum()
        whole = torch.empty(4)
        whole.copy_(torch.ones(4))  # written whole by one op: the program's value at once
        whole.mul(2)
    ops = [r for r in _ops(tmp_path / "t.jsonl") if r["op"] not in ("aten::full", "aten::ones")]
    selects = [r for r in ops if r["op"] == "aten::select.int"]
    copies = [r for r in ops if r["op"] == "aten::copy_"]
    # The first select reads the `empty`'s own value (the diff follows it from there); the later ones, channels
    # written and channels not yet.
    assert [bool(s["in"][0].get("uninit") and s["out"][0].get("uninit")) for s in selects] == [False, True, True]
    assert [bool(c["out"][0].get("uninit")) for c in copies] == [False] * 4  # what each write wrote is compared
    total = next(r for r in ops if r["op"] == "aten::sum")
    assert not total["in"][0].get("uninit") and total["out"][0]["fp"]["sum"] == 6.0  # every channel written
    doubled = next(r for r in ops if r["op"] in ("aten::mul.Tensor", "aten::mul.Scalar"))
    assert not doubled["in"][0].get("uninit") and doubled["in"][0]["fp"]["sum"] == 4.0


def test_an_empty_never_written_whole_is_forgotten_with_its_tensor() -> None:
    """A storage is remembered by its address, which a later allocation may take once it is freed: the entry
    must go with the `empty` tensor, or a new tensor there would read as garbage."""
    from tracediff.record.storage_resizes import StorageResizes

    with StorageResizes() as resizes:
        scratch = torch.empty(64)
        resizes.unwritten(scratch)
        assert resizes.read(scratch) is None  # not written at all: the `empty`'s own value, followed by the diff
        resizes.written(scratch[:8])
        resizes.written(scratch[:8])  # the same view again: still 56 elements to write
        assert resizes.read(scratch) is True  # partly written: garbage
        del scratch
        gc.collect()
        assert not resizes.pending


def test_rnn_workspace_is_marked_uninitialized_but_its_results_are_not(tmp_path: Path) -> None:
    # A CPU LSTM in training returns a uint8 workspace for its backward, partly
    # never written: its bytes differ run to run, so comparing it is a false alarm.
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 4, batch_first=True)
    with tracediff.record(tmp_path / "t.jsonl"):
        lstm(torch.randn(2, 3, 4, requires_grad=True))[0].sum().backward()
    ops = _ops(tmp_path / "t.jsonl")
    (layer,) = [r for r in ops if r["op"] == "aten::mkldnn_rnn_layer"]
    marked = {t["a"]: bool(t.get("uninit")) for t in layer["out"]}
    assert marked == {"0": False, "1": False, "2": False, "3": True}
    assert layer["out"][3]["dt"] == "uint8"
    assert any(r["op"] == "aten::mkldnn_rnn_layer_backward" for r in ops)


def test_backward_ops_are_tagged(tmp_path: Path) -> None:
    net = Net()
    x = torch.randn(2, 4, requires_grad=True)
    with tracediff.record(tmp_path / "t.jsonl"):
        net(x).backward()
    ops = _ops(tmp_path / "t.jsonl")
    assert any(r.get("bw") for r in ops)
    assert not any(r.get("bw") for r in ops if r["op"] == "aten::cos")


def test_regions_are_recorded_under_eager_too(tmp_path: Path) -> None:
    net = Net()
    with tracediff.record(tmp_path / "t.jsonl", backend="eager"):
        compiled = torch.compile(net)
        assert compiled._orig_mod is net and compiled.block is net.block  # eager: the module itself, wrapped
        compiled(torch.randn(2, 4))
        net(torch.randn(2, 4))  # called directly, not through torch.compile's result: no region, as under inductor
        compiled(torch.randn(2, 4))
    trace, records = read_trace(tmp_path / "t.jsonl")
    regions = [(r["ev"], r["name"], r["call"]) for r in records if r["t"] == "region"]
    assert regions == [("enter", "Net.forward", 0), ("exit", "Net.forward", 0),
                       ("enter", "Net.forward", 1), ("exit", "Net.forward", 1)]
    assert trace.footer["compile_calls"] == 1


def test_compiled_ops_get_source_and_module_from_the_graph(tmp_path: Path) -> None:
    net = Net()
    with tracediff.record(tmp_path / "t.jsonl", backend="aot_eager"):
        torch.compile(net)(torch.randn(2, 4))
    cos = next(r for r in _ops(tmp_path / "t.jsonl") if r["op"] == "aten::cos")
    assert cos["g"]  # ran inside a compiled graph
    assert cos["src"] == f"{HERE}:{_line_of('# the cos line')}"
    assert cos["m"] == "Net.block"


def test_recording_changes_no_result() -> None:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(3, 4)
    expected = net(x)
    with tracediff.record("/dev/null"):
        got = net(x)
    assert torch.equal(expected, got)


def test_an_exception_keeps_a_complete_trace(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        with tracediff.record(tmp_path / "t.jsonl"):
            torch.ones(2) + 1
            raise ValueError("boom")
    trace, records = read_trace(tmp_path / "t.jsonl")
    assert not trace.truncated
    assert trace.failed["type"] == "ValueError" and trace.failed["message"] == "boom"
    assert [r["op"] for r in records] == ["aten::ones", "aten::add.Tensor"]


def test_gzip_trace(tmp_path: Path) -> None:
    with tracediff.record(tmp_path / "t.jsonl.gz"):
        torch.ones(2) * 3
    assert len(_ops(tmp_path / "t.jsonl.gz")) == 2


class _Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class _Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = _Head()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def test_backward_ops_land_in_the_innermost_module(tmp_path: Path) -> None:
    net = _Outer()
    with tracediff.record(tmp_path / "t.jsonl"):
        net(torch.randn(3, 4, requires_grad=True)).sum().backward()
    backward = {r["op"]: r["m"] for r in _ops(tmp_path / "t.jsonl") if r.get("bw")}
    assert backward["aten::gelu_backward"] == "_Outer.block.act"
    assert backward["aten::mm"] == "_Outer.block.fc"  # the last mm is the first layer's


def test_third_party_code_in_site_packages_is_the_source(tmp_path: Path) -> None:
    # site-packages sits inside the stdlib directory; model libraries there are user-facing code.
    import sysconfig

    fake = Path(sysconfig.get_paths()["purelib"]) / "some_model_lib" / "modeling_fake.py"
    code = compile("torch.ones(2).cos()", str(fake), "exec")
    with tracediff.record(tmp_path / "t.jsonl"):
        exec(code, {"torch": torch})
    assert {r["src"] for r in _ops(tmp_path / "t.jsonl")} == {"modeling_fake.py:1"}


def test_a_forward_without_backward_keeps_no_graph_alive(tmp_path: Path) -> None:
    # An eval loop with autograd on must not grow: nothing may hold the graph.
    import gc
    import weakref

    net = _Outer()
    with tracediff.record(tmp_path / "t.jsonl"):
        out = net(torch.randn(3, 4, requires_grad=True))
        alive = weakref.ref(out)
        del out
        gc.collect()
        assert alive() is None


def test_saved_activations_are_freed_without_a_backward(tmp_path: Path) -> None:
    # torch's ModTracker keeps them alive through grad hooks that never fire (pytorch#139214).
    import gc
    import weakref

    saved: list[weakref.ref] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(weakref.ref(t))
        return t

    net = _Outer()
    with tracediff.record(tmp_path / "t.jsonl"), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        for _ in range(3):
            net(torch.randn(3, 4, requires_grad=True)).sum()
        gc.collect()
    assert saved and all(ref() is None for ref in saved)


def test_an_eager_backward_op_is_named_by_the_forward_line_that_made_it(tmp_path: Path) -> None:
    """`loss.backward()` names no op; the forward line whose autograd node runs it does."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "w = torch.randn(4, 4, requires_grad=True)\n"
        "x = torch.randn(3, 4)\n"
        "h = torch.tanh(x @ w)\n"
        "loss = (h * h).sum()\n"
        "loss.backward()\n"
    )
    trace = tmp_path / "t.jsonl"
    subprocess.run([sys.executable, "-m", "tracediff.cli", "record", str(script), "-o", str(trace)], check=True,
                   capture_output=True)
    backward = {r["op"]: r.get("src") for r in read_trace(trace)[1] if r.get("bw")}
    assert backward["aten::tanh_backward"] == "train.py:4"
    assert backward["aten::mm"] == "train.py:4"
    assert backward["aten::mul.Tensor"] == "train.py:5"


def test_kernel_buffers_that_reinterpret_one_storage_are_filed_as_aliases_of_it() -> None:
    """CPU Llama under inductor (bench seed 11, g0n2): two kernels each wrote half of a `cat`'s buffer
    through `reinterpret_tensor` views torch knows nothing of, and a third kernel read the buffer whole. The
    reader's input had no producer, so the diff's walk back through B stopped there and never reached the
    pass's `mul` of RMSNorm's variance behind it."""
    from tracediff.record.mode import TraceRecorder

    reinterpret = torch._C._dynamo.guards._reinterpret_tensor  # what inductor's wrapper code calls
    recorder = TraceRecorder(writer=None)  # type: ignore[arg-type]  # describes tensors only: writes nothing
    buffer = torch.zeros(8)
    written = []
    for offset in (0, 4):  # two kernels, each writing one half through an alias deleted right after
        half = reinterpret(buffer, (4,), (1,), offset)
        recorder.link_kernel_buffers([half])
        half.data.fill_(1.0)  # as a kernel writes: behind the version counter (`.data` has its own)
        written += recorder.describe_tensors([("out_ptr0", half)], written=True)
        del half
    gc.collect()
    recorder.link_kernel_buffers([buffer])  # the third kernel reads the whole buffer
    (read,) = recorder.describe_tensors([("in_ptr0", buffer)])
    owner = written[0]["id"]
    assert "b" not in written[0] and written[1]["b"] == owner and read["b"] == owner
    assert written[1]["v"] == written[0]["v"] + 1
    assert read["v"] == written[1]["v"]  # the value the last write made
    assert read["fp"]["sum"] == 8.0  # fingerprinted anew, not a stale value of its own


def test_dynamo_never_traces_the_recorder(tmp_path: Path) -> None:
    """An eager op run from a frame dynamo skipped reaches the recorder with dynamo's frame callback on: the
    recorder's own frames must not be offered to dynamo (torch wraps a mode in `torch._dynamo.disable` for
    that; record/mode.py does it more cheaply)."""
    from torch._dynamo.decorators import skip
    from torch._dynamo.utils import counters

    @skip
    def eager_part(x: torch.Tensor) -> torch.Tensor:
        return x.cos() + 1

    def f(x: torch.Tensor) -> torch.Tensor:
        return eager_part(x.sin()) * 2

    def frames_seen(record: bool) -> int:
        torch._dynamo.reset()
        counters.clear()
        compiled, x = torch.compile(f, backend="eager"), torch.randn(4)
        if record:
            with tracediff.record(tmp_path / "t.jsonl"):
                compiled(x)
        else:
            compiled(x)
        return counters["frames"]["total"]

    assert frames_seen(record=True) == frames_seen(record=False)
    ops = [r.get("op") for r in read_trace(tmp_path / "t.jsonl")[1]]
    assert ["aten::sin", "aten::cos", "aten::add.Tensor", "aten::mul.Tensor"] == [o for o in ops if o]



def test_an_op_dispatched_with_no_python_frame_above_is_recorded(tmp_path: Path, monkeypatch) -> None:
    """Autograd's device thread (a CUDA backward) calls the mode from C++: `__torch_dispatch__` is then the
    outermost Python frame. A thread started on it directly by `_thread` makes the same stack on CPU."""
    import _thread
    import time

    raised: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: raised.append(unraisable.exc_value))
    with tracediff.record(tmp_path / "t.jsonl") as session:
        x = torch.randn(3)
        recorder, running = session.recorder, _thread._count()
        recorded = recorder.ops
        _thread.start_new_thread(recorder.__torch_dispatch__, (torch.ops.aten.cos.default, (), (x,), {}))
        deadline = time.monotonic() + 30
        while recorder.ops == recorded and not raised and time.monotonic() < deadline:  # the thread has started...
            time.sleep(0.01)
        while _thread._count() > running and time.monotonic() < deadline:  # ...and ended
            time.sleep(0.01)
    assert raised == []
    cos = [r for r in _ops(tmp_path / "t.jsonl") if r["op"] == "aten::cos"]
    assert len(cos) == 1 and cos[0]["out"][0]["fp"]["n"] == 3


def test_a_view_of_an_unchanged_base_is_read_once_and_again_after_a_write(tmp_path: Path, monkeypatch) -> None:
    """Each call of a Linear makes a fresh `t(weight)`, whose statistics come from the weight's and which is
    read (for its sketch) where an op first reads it: once while the weight is unchanged, and again once the
    weight is written (in place, as an optimizer does). Another base of the same geometry, and a conjugate
    view of the same geometry, are not taken for it."""
    from tracediff.record import mode

    reads: list[tuple[int, ...]] = []
    real, real_in_place = mode.fingerprint, mode.fingerprint_in_place

    def in_place(t: torch.Tensor) -> dict | None:
        fp = real_in_place(t)
        if fp is not None:
            reads.append(tuple(t.shape))
        return fp

    monkeypatch.setattr(mode, "fingerprint", lambda t, **kw: reads.append(tuple(t.shape)) or real(t, **kw))
    monkeypatch.setattr(mode, "fingerprint_in_place", in_place)
    w = torch.arange(12.0).view(3, 4).contiguous()
    other = torch.arange(12.0).view(3, 4).flip(0).contiguous()
    z = torch.complex(torch.ones(2, 3), torch.arange(6.0).view(2, 3))
    for t in (w, other, z):
        t.mul_(1)  # as `nn.init` leaves a weight: past version 0
    transposed, conjugate_transposed = z.t(), z.conj().t()  # views first read inside
    with tracediff.record(tmp_path / "t.jsonl"):
        for _ in range(2):
            torch.sum(w.t(), 0)
        w.mul_(2)
        torch.sum(w.t(), 0), torch.sum(other.t(), 0)
        torch.sum(transposed, 0), torch.sum(conjugate_transposed, 0)
    assert reads.count((4, 3)) == 3  # w.t() before and after the write, and other.t(): not w.t() again
    ops = _ops(tmp_path / "t.jsonl")
    first, again, written, of_other = [r["in"][0]["fp"] for r in ops if r["op"].startswith("aten::sum")][:4]
    assert first == again and first["sum"] == sum(range(12))
    assert written["sum"] == 2 * first["sum"] and written["sk"] != first["sk"]
    assert of_other["sum"] == first["sum"] and of_other["sk"] != first["sk"]
    # Both complex views of z, as read where they are first read (a conjugate one by the clone resolving it):
    complex_views = [t["fp"]["sum"] for r in ops for t in r["in"] if t["dt"] == "complex64" and "b" in t]
    assert sorted(complex_views) == [6 - 15, 6 + 15]


def test_a_higher_order_operator_run_eagerly_is_recorded_as_one_op(tmp_path: Path) -> None:
    """H200, `flex_attention` run eagerly under recording: torch raised NotImplementedError ("no rule registered for
    HigherOrderOperator flex_attention and mode TraceRecorder") into the program. Now it runs, recorded as one op
    with its tensors and the values it returns."""
    from torch.nn.attention.flex_attention import flex_attention

    def causal(score, b, h, q, kv):
        return torch.where(q >= kv, score, -float("inf"))

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    expected = flex_attention(q, k, v, score_mod=causal)
    with tracediff.record(tmp_path / "t.jsonl"):
        got = flex_attention(q, k, v, score_mod=causal)
    torch.testing.assert_close(got, expected)
    (flex,) = [r for r in _ops(tmp_path / "t.jsonl") if r["op"] == "higher_order::flex_attention"]
    assert [t["sh"] for t in flex["in"][:3]] == [[1, 2, 16, 8]] * 3
    assert flex["out"][0]["fp"]["sum"] == pytest.approx(float(expected.sum()), rel=1e-5)


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_nested_tensors_are_recorded_by_their_values(tmp_path: Path, layout: torch.layout) -> None:
    """A nested tensor has no single shape (a strided one no `sizes` at all): it is recorded by its values buffer,
    and the program goes on (issue 48: `nn.TransformerEncoder`'s fast path crashed the recording)."""
    parts = [torch.arange(6.0).reshape(2, 3), torch.ones(4, 3)]
    with tracediff.record(tmp_path / "t.jsonl"):
        nested = torch.nested.nested_tensor(parts, layout=layout)
        doubled = nested * 2
    assert torch.equal(doubled.unbind()[1], torch.full((4, 3), 2.0))
    described = [t for r in _ops(tmp_path / "t.jsonl") for t in r["out"] if t.get("nt")]
    assert described and all(t["nt"] == str(layout).removeprefix("torch.") for t in described)
    last = described[-1]
    assert last["sh"] == ([18] if layout == torch.strided else [6, 3])
    assert last["fp"]["sum"] == pytest.approx(2 * (15 + 12))


def test_a_failure_of_the_recorder_is_its_own_and_the_program_goes_on(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """tracediff's own error while recording an op never reaches the program: the op runs, its record is lost,
    and the footer says so (issue 48)."""
    from tracediff.record.mode import TraceRecorder

    write_op = TraceRecorder._write_op

    def broken(self: TraceRecorder, info: Any, *rest: Any) -> None:
        if info.name.startswith("aten::cos"):
            raise RuntimeError("a tensor tracediff cannot read")
        write_op(self, info, *rest)

    monkeypatch.setattr(TraceRecorder, "_write_op", broken)
    x = torch.randn(8)
    with tracediff.record(tmp_path / "t.jsonl"):
        y = torch.cos(x).sin()
    assert torch.equal(y, torch.cos(x).sin())
    trace, records = read_trace(tmp_path / "t.jsonl")
    assert [r["op"] for r in records if r["t"] == "op"] == ["aten::sin"]
    assert trace.footer["recorder_failures"] == {"count": 1,
                                                 "first": "aten::cos: RuntimeError: a tensor tracediff cannot read"}


def test_a_lazy_modules_parameters_before_its_first_forward_are_no_failure(tmp_path: Path) -> None:
    """`nn.LazyLinear`'s weight has no shape until the first forward: ops that touch it then (a `detach`) cannot
    be described, and were counted as tracediff's own failures, with a note in every report of the run
    (bench/real_programs/spatial_transformer.py). They are skipped; the forward itself is recorded."""
    model = torch.nn.Sequential(torch.nn.LazyLinear(3))
    with tracediff.record(tmp_path / "t.jsonl"):
        model(torch.ones(2, 4)).sum()
        torch.nn.Module.state_dict(model)  # a detach of each parameter, materialized by now
    trace, records = read_trace(tmp_path / "t.jsonl")
    assert not trace.footer.get("recorder_failures"), trace.footer.get("recorder_failures")
    assert any(r.get("op", "").startswith("aten::addmm") for r in records)


def test_importing_dynamo_inside_a_module_call_keeps_the_module_path(tmp_path: Path) -> None:
    """An eager recording imports dynamo only when something does (record/after_import.py). Its hook once also
    emptied the module stack: an op after an import of dynamo inside `Net.forward` lost its module."""
    from tests.conftest import child_command

    script = tmp_path / "s.py"
    script.write_text(
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        import torch._dynamo  # noqa: F401\n"
        "        return torch.sin(x)\n"
        "Net()(torch.ones(3))\n")
    trace = tmp_path / "t.jsonl"
    subprocess.run(child_command(trace, script, "eager"), check=True, capture_output=True, timeout=300)
    (sin,) = [r for r in _ops(trace) if r["op"] == "aten::sin"]
    assert sin["m"] == "Net"


def test_local_modules_are_the_scripts_own_wherever_they_are_imported_from(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The footer's local_modules (what `tracediff repro` copies): modules whose real file is in the script's
    folder and not in an installed package, found through links to a folder or to a file."""
    from tracediff.record.session import local_modules

    project, outside = tmp_path / "project", tmp_path / "outside"
    (project / "helpers").mkdir(parents=True)
    (project / "site-packages" / "vendored").mkdir(parents=True)
    outside.mkdir()
    (project / "own_a.py").write_text("")
    (project / "helpers" / "__init__.py").write_text("")
    (project / "helpers" / "own_b.py").write_text("")
    (project / "site-packages" / "vendored" / "installed.py").write_text("")
    (outside / "elsewhere.py").write_text("")
    (outside / "via_folder").symlink_to(project / "helpers")  # a folder link into the project
    (outside / "own_c.py").symlink_to(project / "own_a.py")  # a file link into the project
    (project / "linked_out.py").symlink_to(outside / "elsewhere.py")  # a file link out of it
    for folder in (project, project / "site-packages", outside, outside / "via_folder"):
        monkeypatch.syspath_prepend(str(folder))
    names = ["own_a", "helpers.own_b", "vendored.installed", "elsewhere", "own_c", "linked_out", "own_b"]
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
        __import__(name)
    found = {m["name"]: m["file"] for m in local_modules(str(project)) if m["name"] in names}
    assert found == {"own_a": "own_a.py", "helpers.own_b": "helpers/own_b.py", "own_c": "own_a.py",
                     "own_b": "helpers/own_b.py"}


@pytest.mark.fresh_children  # a fork server's child inherits the server's frozen imports: test child.py's own
def test_a_recorded_scripts_own_cyclic_garbage_is_collected(tmp_path: Path) -> None:
    """The child freezes what it imported before the script (child.py): the script's own objects stay
    collectable, and the imports stay frozen."""
    from tests.conftest import invoke

    script = tmp_path / "cycles.py"
    script.write_text(
        "import gc, weakref\n"
        "class Node:\n"
        "    pass\n"
        "a, b = Node(), Node()\n"
        "a.other, b.other = b, a\n"
        "collected = []\n"
        "weakref.finalize(a, collected.append, 'a')\n"
        "del a, b\n"
        "gc.collect()\n"
        "print('collected', collected, 'frozen', gc.get_freeze_count() > 1000)\n")
    result = invoke("record", str(script), "--backend", "eager", "-o", str(tmp_path / "t.jsonl"))
    assert result.exit_code == 0, result.stderr
    assert "collected ['a'] frozen True" in (tmp_path / "t.log").read_text()
