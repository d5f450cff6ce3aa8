"""Same-input judgement (record/judging/): each compiled call re-run on its own inputs, uncompiled and in float64.

In process, with small backends that are wrong on purpose (a graph rewrite at dynamo's level, an
aot_autograd backward rewrite): fast, no inductor. The end-to-end runs are in test_same_inputs_runs.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd

from tracediff.config import Config, Tolerance
from tracediff.diff.same_inputs import read_findings
from tracediff.judge.measure import Measurement, any_wrong, carrying, judge, measure
from tracediff.record.judging.backend import JudgingBackend, inner_backend

F32 = Tolerance(1e-4, 1e-6)


class Sink:
    """Collects the checks a judged graph writes, as the recorder would."""

    def __init__(self) -> None:
        self.checks: list[dict[str, Any]] = []

    def write_check(self, record: dict[str, Any]) -> None:
        self.checks.append({"t": "check", "at": len(self.checks), **record})

    def quiet(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def records_here(self) -> bool:
        return True

    @property
    def region_call(self) -> tuple[str, int] | None:
        return None

    @property
    def region_root(self) -> str | None:
        return None

    def user_line(self) -> None:
        return None

    def wrong(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if any(judge(Measurement.from_record(o), F32).wrong for o in c["outs"])]


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def judged(backend: Any, sink: Sink) -> JudgingBackend:
    return JudgingBackend(inner_backend(backend, {}), sink, "f (region 0)")


def cos_as_sin(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A backend that computes sin where the graph says cos: wrong in its forward."""
    for node in gm.graph.nodes:
        if node.target is torch.cos:
            node.target = torch.sin
    gm.recompile()
    return gm.forward


# -- the criterion --------------------------------------------------------------------------------------


def test_a_dtype_or_shape_other_than_eager_is_wrong_whatever_the_values() -> None:
    x = torch.arange(6)
    m = measure("out0", x.cumsum(0), x.cumsum(0, dtype=torch.bfloat16), None)
    assert m is not None and judge(m, F32).wrong and "dtype int64 where eager gives bfloat16" in judge(m, F32).why
    m = measure("out0", torch.zeros(2, 3), torch.zeros(3, 2), torch.zeros(3, 2))
    assert m is not None and judge(m, F32).wrong


def test_integer_results_must_equal_eager_exactly() -> None:
    m = measure("out0", torch.tensor([1, 2, 4]), torch.tensor([1, 2, 3]), None)
    assert m is not None and judge(m, F32).wrong
    m = measure("out0", torch.tensor([True, False]), torch.tensor([True, False]), None)
    assert m is not None and not judge(m, F32).wrong


def test_compiled_further_from_float64_than_eager_is_wrong_and_closer_is_right() -> None:
    torch.manual_seed(0)
    exact = torch.randn(1000, dtype=torch.float64)
    eager = exact.float()
    wrong = (exact * 1.001).float()
    assert judge(measure("out0", wrong, eager, exact), F32).wrong  # type: ignore[arg-type]
    # A fused bf16 kernel that keeps float32 where eager rounds: far from eager, closer to float64.
    eager_bf16 = exact.bfloat16()
    fused = exact.float().bfloat16()  # the same rounding once, not twice
    m = measure("out0", fused, eager_bf16, exact)
    assert m is not None and not judge(m, Tolerance(1.6e-2, 1e-3)).wrong
    better = (exact + 1e-9).float()
    noisy_eager = (exact * (1 + 5e-4)).float()
    assert not judge(measure("out0", better, noisy_eager, exact), F32).wrong  # type: ignore[arg-type]


def test_a_few_wrong_elements_in_a_large_tensor_are_found_by_the_elementwise_test() -> None:
    exact = torch.randn(100_000, dtype=torch.float64)
    compiled = exact.float().clone()
    compiled[17] += 0.02  # within the tolerance as an rms over 100000 elements
    m = measure("out0", compiled, exact.float(), exact)
    assert m is not None and judge(m, F32).wrong and "largest error" in judge(m, F32).why


def test_nan_where_eager_and_float64_are_finite_is_wrong() -> None:
    exact = torch.ones(4, dtype=torch.float64)
    compiled = torch.tensor([1.0, float("nan"), 1.0, 1.0])
    m = measure("out0", compiled, exact.float(), exact)
    assert m is not None and m.nonfinite == 1 and judge(m, F32).wrong


# Hugging Face Llama's float32 loss at step 6 of a healthy bf16-autocast AdamW run under inductor (recorded on
# CPU): 1.4e-4 from eager's, 6x eager's error from float64 where eager's was small by luck. Its logits are
# bfloat16, so it carries bfloat16's rounding: judged at float32's precision it was a false alarm.
_BF16_LOSS = {"name": "out4", "dtype": "float32", "shape": [], "dist": 6.90937e-4, "err_c": 5.94068e-4,
              "err_e": 9.6869e-5, "scale": 5.0070935, "size": 5.0070935, "dist_max": 6.90937e-4,
              "err_c_max": 5.94068e-4, "err_e_max": 9.6869e-5, "scale_max": 5.0070935}


def test_a_float32_value_computed_from_bfloat16_is_judged_at_bfloat16s_precision() -> None:
    check = {"at": 0, "g": "f (region 0) graph 0", "call": 6, "ph": "fw", "outs": [_BF16_LOSS]}
    findings = read_findings([check], Config())
    assert findings is not None and findings.wrong_calls == 1  # as float32 alone
    carried = {**check, "outs": [{**_BF16_LOSS, "carried": "bfloat16"}]}
    findings = read_findings([carried], Config())
    assert findings is not None and findings.judged and findings.wrong_calls == 0
    # A fault is still one: the same loss 10% off.
    faulty = {**_BF16_LOSS, "carried": "bfloat16", "dist": 0.5, "err_c": 0.5}
    findings = read_findings([{**check, "outs": [faulty]}], Config())
    assert findings is not None and findings.wrong_calls == 1
    assert any_wrong([Measurement.from_record(_BF16_LOSS)])
    assert not any_wrong([Measurement.from_record(_BF16_LOSS)], carried="bfloat16")


def test_only_floating_outputs_wider_than_the_autocast_dtype_carry_it() -> None:
    wide, narrow = Measurement("out0", "float32", [2]), Measurement("out1", "bfloat16", [2])
    integer, bad = Measurement("out2", "int64", [2]), Measurement("out3", "float32", [2], problem="dtype")
    assert [m.carried for m in carrying([wide, narrow, integer, bad], "bfloat16")] == ["bfloat16", None, None, None]
    assert carrying([wide], None) == [wide]


def test_a_call_under_bfloat16_autocast_records_its_float32_outputs_and_gradients_as_carrying_it() -> None:
    sink = Sink()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 16)
    compiled = torch.compile(model, backend=judged("aot_eager", sink))
    x = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.log_softmax(compiled(x).float(), dim=-1).mean()
    loss.backward()  # outside the autocast block, as a training loop does
    forward, backward = (next(c for c in sink.checks if c["ph"] == ph) for ph in ("fw", "bw"))
    assert [o["dtype"] for o in forward["outs"]] == ["bfloat16"] and "carried" not in forward["outs"][0]
    assert backward["outs"] and all(o["dtype"] == "float32" and o["carried"] == "bfloat16" for o in backward["outs"])
    assert not sink.wrong()
    with torch.autocast("cpu", enabled=False):
        compiled(x).sum().backward()
    assert all("carried" not in o for c in sink.checks[2:] for o in c["outs"])


# -- judged graphs ---------------------------------------------------------------------------------------


def test_a_forward_fault_is_found_on_its_call_and_narrowed_to_its_node() -> None:
    sink = Sink()

    def f(x: torch.Tensor) -> torch.Tensor:
        h = x * 2 + 1
        y = torch.cos(h)
        return torch.relu(y).sum(1)

    cf = torch.compile(f, backend=judged(cos_as_sin, sink))
    x = torch.randn(4, 6)
    assert not torch.allclose(cf(x), f(x))  # the backend is wrong, and the program still sees its result
    (check,) = sink.wrong()
    assert check["ph"] == "fw" and check["call"] == 0
    culprit = check["culprit"]
    assert culprit["op"] == "aten::cos" and culprit["src"].startswith("test_same_inputs.py:")
    assert "y = torch.cos(h)" in culprit["code"]


def test_a_healthy_backend_is_right_on_every_call_of_a_training_loop() -> None:
    sink = Sink()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 1))
    compiled = torch.compile(model, backend=judged("aot_eager", sink))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for _ in range(5):
        loss = F.mse_loss(compiled(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    phases = [c["ph"] for c in sink.checks]
    assert phases.count("fw") == 5 and phases.count("bw") == 5
    assert sink.wrong() == []


def test_the_program_sees_what_it_would_see_without_the_judge() -> None:
    """Random ops draw the same numbers; parameters, buffers and results are the same as an unjudged run."""

    def train(backend: Any) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Dropout(0.3),
                                    torch.nn.Linear(16, 1))
        compiled = torch.compile(model, backend=backend)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(16, 8)
        losses = []
        for _ in range(3):
            loss = compiled(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return [*losses, torch.rand(3), *(t.detach().clone() for t in model.state_dict().values())]

    plain = train("aot_eager")
    torch._dynamo.reset()
    sink = Sink()
    with_judge = train(judged("aot_eager", sink))
    assert len(sink.checks) == 6 and sink.wrong() == []
    assert all(torch.equal(a, b) for a, b in zip(plain, with_judge))


def test_wrong_values_written_into_an_input_are_found() -> None:
    def add_one_more(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        def run(*args: Any) -> Any:
            out = gm.forward(*args)
            args[0].add_(1e-2)  # the compiled code writes its mutated input wrong
            return out
        return run

    sink = Sink()

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = x.clone()
        x.mul_(2)  # copy, then mutate in place
        return z + y

    cf = torch.compile(f, backend=judged(add_one_more, sink))
    x, y = torch.randn(5), torch.randn(5)
    before = x.clone()
    cf(x, y)
    assert torch.allclose(x, before * 2 + 1e-2)  # the program got the compiled code's write, once
    (check,) = sink.wrong()
    wrong = [o["name"] for o in check["outs"] if judge(Measurement.from_record(o), F32).wrong]
    assert wrong == ["x (written in place)"]


def test_a_returned_dtype_other_than_eager_is_found() -> None:
    def drops_dtype(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return lambda *args: tuple(t.to(torch.int64) for t in gm.forward(*args))

    sink = Sink()
    cf = torch.compile(lambda x: torch.cumsum(x, 0, dtype=torch.bfloat16), backend=judged(drops_dtype, sink))
    cf(torch.arange(8))
    (check,) = sink.wrong()
    assert "dtype int64 where eager gives bfloat16" in judge(Measurement.from_record(check["outs"][0]), F32).why


def _tanh_backward_scaled(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """aot_autograd's backward compiler that scales `tanh_backward` by 1.01."""
    for node in gm.graph.nodes:
        if node.target is torch.ops.aten.tanh_backward.default:
            with gm.graph.inserting_after(node):
                bumped = gm.graph.call_function(torch.ops.aten.mul.Tensor, (node, 1.01))
            node.replace_all_uses_with(bumped, delete_user_cb=lambda user, bumped=bumped: user is not bumped)
            break
    gm.recompile()
    return gm


def test_a_wrong_gradient_from_a_compiled_backward_is_found_and_narrowed_to_its_forward_op() -> None:
    sink = Sink()
    wrong_backward = aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=_tanh_backward_scaled)
    w1, w2 = torch.randn(6, 4, requires_grad=True), torch.randn(1, 6, requires_grad=True)

    def f(x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ w1.t())
        return (h @ w2.t()).sum()

    cf = torch.compile(f, backend=judged(wrong_backward, sink))
    x = torch.randn(3, 4)
    loss = cf(x)
    assert not sink.wrong()  # the forward is right
    loss.backward()
    (check,) = sink.wrong()
    assert check["ph"] == "bw"
    names = {o["name"] for o in check["outs"] if judge(Measurement.from_record(o), F32).wrong}
    assert "grad of w1" in names and "grad of w2" not in names
    assert check["culprit"]["op"] == "aten::tanh" and "h = torch.tanh(" in check["culprit"]["code"]


def test_an_optimizer_step_reads_its_state_as_attributes_and_the_references_never_write_them() -> None:
    def step_run(backend: Any) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)

        @torch.compile(backend=backend)
        def step() -> None:
            opt.step()

        for _ in range(3):
            model(torch.randn(2, 4)).square().sum().backward()
            step()
        return [p.detach().clone() for p in model.parameters()]

    plain = step_run("aot_eager")
    torch._dynamo.reset()
    sink = Sink()
    assert all(torch.equal(a, b) for a, b in zip(plain, step_run(judged("aot_eager", sink))))
    assert len(sink.checks) == 3 and sink.wrong() == []
    written = [o["name"] for o in sink.checks[0]["outs"]]
    assert sum(name.startswith("attribute ") for name in written) >= 2  # parameters and state, as attributes


def test_findings_name_the_first_wrong_call_and_count_the_rest() -> None:
    right = {"name": "out0", "dtype": "float32", "shape": [4], "dist": 1e-8, "err_c": 1e-8, "err_e": 1e-8, "scale": 1.0}
    wrong = {"name": "out0", "dtype": "float32", "shape": [4], "dist": 1e-2, "err_c": 1e-2, "err_e": 1e-8, "scale": 1.0}
    checks = [{"at": i, "g": "f (region 0) graph 0", "call": i, "ph": "fw", "outs": [wrong if i >= 2 else right]}
              for i in range(4)]
    findings = read_findings(checks, Config())
    assert findings is not None and findings.wrong_calls == 2 and findings.calls == 4
    assert findings.first_wrong is not None and findings.first_wrong.check["call"] == 2
    assert read_findings([], Config()) is None


def test_a_call_the_judge_cannot_rerun_is_recorded_unjudged_and_the_program_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tracediff.record.judging import graph

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no reference here")

    monkeypatch.setattr(graph, "run_graph", broken)
    sink = Sink()
    cf = torch.compile(lambda x: torch.cos(x) * 2, backend=judged("aot_eager", sink))
    x = torch.randn(5)
    assert torch.allclose(cf(x), torch.cos(x) * 2)
    (check,) = sink.checks
    assert check["unjudged"] == "its uncompiled graph raised RuntimeError: no reference here"
    findings = read_findings(sink.checks, Config())
    assert findings is not None and not findings.judged and findings.unjudged == 1


def _judged_traces(tmp_path: Path, wrong: bool) -> list[Path]:
    """A and B differ at their second op (the drift a trace diff sees); B holds one check of its compiled call,
    right or wrong, whose culprit is at that op's line."""
    from tests.synth import TraceBuilder

    x = torch.arange(6.0)
    traces = []
    for name, scale in (("a", 1.0), ("b", 1.01)):
        t = TraceBuilder(tmp_path / f"{name}.jsonl")
        t.region("enter", [t.tensor("x", x, arg="in0")])
        y = x * scale
        t.op("aten::mul.Tensor", [t.tensor("x", x)], [t.tensor("y", y, arg="0")], src="model.py:7")
        t.region("exit", [t.tensor("y", y, arg="out0")])
        if name == "b":
            error = 1e-2 if wrong else 1e-8
            t.writer.write({"t": "check", "at": t.seq, "g": "Net.forward (region 0) graph 0", "call": 0, "ph": "fw",
                            "rc": ["Net.forward", 0],
                            "outs": [{"name": "out0", "dtype": "float32", "shape": [6], "dist": error,
                                      "err_c": error, "err_e": 1e-8, "scale": 3.0, "size": 3.0}],
                            **({"culprit": {"op": "aten::mul.Tensor", "src": "model.py:7", "code": "y = x * s",
                                            "m": "Net"}} if wrong else {})})
        traces.append(t.close())
    return traces


def test_a_drift_with_every_call_right_is_a_match_that_says_where_the_runs_part(tmp_path: Path) -> None:
    from tracediff.diff.decide import decide
    from tracediff.diff.engine import diff_traces

    traces = _judged_traces(tmp_path, wrong=False)
    outcome = decide(diff_traces(*traces, Config()), [str(t) for t in traces], Config())
    assert outcome.verdict.value == "match" and outcome.first_divergence is None
    assert outcome.drift is not None and outcome.drift["source"] == "model.py:7"
    assert any("rounding the program amplified" in note for note in outcome.notes)
    # The traces alone call it a divergence.
    alone = decide(diff_traces(*traces, Config()), [str(t) for t in traces], Config(same_inputs=False))
    assert alone.verdict.value == "diverged"


def test_a_wrong_call_names_the_culprit_at_the_reference_traces_op(tmp_path: Path) -> None:
    from tracediff.diff.decide import decide
    from tracediff.diff.engine import diff_traces

    traces = _judged_traces(tmp_path, wrong=True)
    report = decide(diff_traces(*traces, Config()), [str(t) for t in traces], Config()).to_json()
    first = report["first_divergence"]
    assert report["verdict"] == "diverged" and first["pinned_by"] == "same_inputs"
    assert (first["op"], first["index"], first["source"]) == ("aten::mul.Tensor", 1, "model.py:7")
    assert report["same_inputs"]["first_wrong"]["region_call"] == {"name": "Net.forward", "call": 0}
    assert first["judged"]["kind"] == "wrong"


def test_an_output_that_views_an_input_can_be_written_in_place_as_without_the_judge() -> None:
    """A tap on that input would make the output a view of a custom Function's, which autograd refuses to
    write in place: such a call's backward goes untapped, said as unjudged."""

    def run(backend: Any) -> torch.Tensor:
        torch.manual_seed(0)
        w = torch.randn(4, requires_grad=True)
        out = torch.compile(lambda h: h[1:], backend=backend)(w * 2)
        out.mul_(2)
        out.sum().backward()
        assert w.grad is not None
        return w.grad

    plain = run("aot_eager")
    torch._dynamo.reset()
    sink = Sink()
    assert torch.equal(run(judged("aot_eager", sink)), plain)
    assert [c["ph"] for c in sink.checks] == ["bw", "fw"] and "not tapped" in sink.checks[0]["unjudged"]


class _VAE(torch.nn.Module):
    """torch.distributions' Normal across a graph break: the graph returns `loc` and `scale` and the views
    `broadcast_all` made of them, so one gradient reaches two outputs' hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = torch.nn.Linear(16, 8), torch.nn.Linear(4, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributions import Normal, kl_divergence

        mu, logvar = self.enc(x).chunk(2, dim=-1)
        q = Normal(mu, (0.5 * logvar).exp())
        recon = F.binary_cross_entropy_with_logits(self.dec(q.rsample()), x, reduction="sum")
        return recon + kl_divergence(q, Normal(torch.zeros_like(mu), torch.ones_like(mu))).sum()


def test_a_gradient_that_reaches_two_outputs_is_fed_to_the_references_once() -> None:
    """Before: each output's hook kept the gradient, and the reference was fed it twice, once at the output and
    once at its view: a healthy VAE's encoder gradients were wrong by 1.3 (scale 8), a false DIVERGED."""
    sink = Sink()
    torch.manual_seed(0)
    model = _VAE()
    compiled = torch.compile(model, backend=judged("aot_eager", sink))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = (torch.rand(8, 16) > 0.5).float()
    for _ in range(2):
        loss = compiled(x)
        opt.zero_grad()
        loss.backward()
        opt.step()
    backward = [c for c in sink.checks if c["ph"] == "bw"]
    assert any("grad of enc.weight" in {o["name"] for o in c["outs"]} for c in backward)
    assert sink.wrong() == []


def test_a_wrong_gradient_through_an_output_returned_twice_is_still_found() -> None:
    """The gradient kept once is still compared: a backward fault on the path of a repeated output is found."""
    sink = Sink()
    wrong_backward = aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=_tanh_backward_scaled)
    w = torch.randn(4, 4, requires_grad=True)

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = torch.tanh(x @ w)
        return h, h, h[:2]

    h, again, top = torch.compile(f, backend=judged(wrong_backward, sink))(torch.randn(3, 4))
    (h.sum() + 2 * again.sum() + 3 * top.sum()).backward()
    (check,) = sink.wrong()
    assert check["ph"] == "bw" and [o["name"] for o in check["outs"]] == ["grad of w"]


def test_outputs_that_pass_their_gradient_on_to_another_outputs_hook() -> None:
    from tracediff.record.judging.shared_grads import passed_on

    x = torch.randn(4, 3, requires_grad=True)
    tapped = x.view_as(x)  # the call's input, as the judge's tap gives it
    a = tapped * 2
    b = a.exp()  # computed from output 0
    independent = tapped.sin()
    outputs = [a, a, a[1:], b, independent, torch.ones(2)]
    assert passed_on(outputs, [0, 1, 2, 3, 4], [tapped]) == {1, 2, 3}


def test_calls_under_inference_mode_are_judged() -> None:
    """Inference-mode tensors have no version counter: the judge tells the inputs a graph writes by their values
    (before: every call unjudged, "Inference tensors do not track version counter")."""

    def f(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.add_(x)
        return torch.cos(cache) * 2

    for backend, wrong in (("aot_eager", False), (cos_as_sin, True)):
        torch._dynamo.reset()
        sink = Sink()
        with torch.inference_mode():
            cache = torch.zeros(8)
            torch.compile(f, backend=judged(backend, sink))(torch.randn(8), cache)
        assert [c["ph"] for c in sink.checks] == ["fw"] and not sink.checks[0].get("unjudged")
        assert [o["name"] for o in sink.checks[0]["outs"]] == ["out0", "cache (written in place)"]
        assert bool(sink.wrong()) is wrong


def test_a_small_gradient_is_judged_on_its_own_size_not_the_absolute_tolerance() -> None:
    """BART trained under inductor with the encoder's fc2 bias gradient (rms 5e-5) 1% off: within float32's atol
    of 1e-6, yet Adam scales a gradient by its own size and the weights moved beyond the tolerance. Forward values
    of that size keep the atol; a gradient rounded as eager rounds still passes."""
    torch.manual_seed(0)
    exact = torch.randn(32, dtype=torch.float64) * 5e-5
    eager = exact.float()
    assert judge(measure("grad of fc2.bias", (exact * 1.01).float(), eager, exact), F32).wrong  # type: ignore[arg-type]
    assert not judge(measure("out0", (exact * 1.01).float(), eager, exact), F32).wrong  # type: ignore[arg-type]
    rounded = (exact * (1 + 2 ** -24)).float()  # one rounding away from eager's
    assert not judge(measure("grad of fc2.bias", rounded, eager, exact), F32).wrong  # type: ignore[arg-type]


def test_a_gradient_on_cuda_is_judged_at_the_cpus_tolerance() -> None:
    """H200 Mistral trained under inductor with a planted 1% fault in the sigmoid the backward recomputes for SiLU:
    the up projection's weight gradient came out 0.13% off (its rms), hundreds of times eager's error from float64,
    and passed `float32@cuda`'s rtol of 1e-3. A forward value as far off keeps CUDA's tolerance, and a gradient
    reordered as a CUDA reduction is (as far from float64 as eager) still passes."""
    def check(name: str, dist: float, err_c: float) -> dict[str, Any]:
        out = {"name": name, "dtype": "float32", "shape": [64, 32], "device": "cuda:0", "dist": dist,
               "err_c": err_c, "err_e": 2e-9, "scale": 1e-2, "size": 1e-2, "dist_max": 4 * dist,
               "err_c_max": 4 * err_c, "err_e_max": 1e-8, "scale_max": 5e-2}
        return {"at": 0, "g": "f (region 0) graph 0", "call": 0, "ph": "bw", "outs": [out]}

    def wrong_calls(name: str, dist: float, err_c: float) -> int:
        findings = read_findings([check(name, dist, err_c)], Config())
        assert findings is not None
        return findings.wrong_calls

    assert wrong_calls("grad of up_proj.weight", 1.3e-5, 1.3e-5) == 1
    assert wrong_calls("out0", 1.3e-5, 1.3e-5) == 0
    assert wrong_calls("grad of up_proj.weight", 2.5e-9, 2.5e-9) == 0


def test_a_gradient_zero_in_exact_math_is_not_judged_on_its_own_size() -> None:
    """A convolution's bias before a batch norm (channels_last_cnn.py under inductor): its gradient is zero in exact
    math, and eager's and the compiled code's are rounding noise of about 5e-9, rounded otherwise."""
    torch.manual_seed(0)
    exact = torch.randn(8, dtype=torch.float64) * 1e-12
    eager = (exact + torch.randn(8, dtype=torch.float64) * 3e-9).float()
    compiled = (exact + torch.randn(8, dtype=torch.float64) * 7e-9).float()
    m = measure("grad of conv1.bias", compiled, eager, exact)
    assert m is not None and m.err_c > 2 * m.err_e and not judge(m, F32).wrong, judge(m, F32).why
