"""Calibrated tolerances: float64 re-run of the reference, per-tensor noise, judging against it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.conftest import FIXTURES, TRACES_ONLY, invoke, marker_line
from tests.synth import TraceBuilder
from tracediff.config import Tolerance
from tracediff.diff.compare import compare_fingerprints
from tracediff.diff.noise import measure_noise, relative_noise
from tracediff.record.fingerprints.fingerprint import fingerprint
from tracediff.record.upcast import Float64Upcast

TOL = Tolerance(1e-4, 1e-6)


def test_noise_widens_the_tolerance_and_says_how_far_above_it_is() -> None:
    a = fingerprint(torch.linspace(1, 2, 100))
    b = fingerprint(torch.linspace(1, 2, 100) * (1 + 1e-3))
    assert not compare_fingerprints(a, b, TOL).ok
    calibrated = compare_fingerprints(a, b, TOL, noise=5e-4, factor=10)
    assert calibrated.ok and calibrated.by_noise and 1.5 < calibrated.above_noise < 2.5
    tight = compare_fingerprints(a, b, TOL, noise=1e-6, factor=10)
    assert not tight.ok and tight.above_noise > 500 and "x above noise" in tight.describe()


def test_noise_never_hides_nan_and_never_tightens() -> None:
    a = fingerprint(torch.ones(4))
    nan = fingerprint(torch.tensor([1.0, float("nan"), 1.0, 1.0]))
    assert not compare_fingerprints(a, nan, TOL, noise=1.0).ok
    assert compare_fingerprints(a, fingerprint(torch.ones(4) * (1 + 1e-5)), TOL, noise=0.0).ok


def test_relative_noise_is_per_statistic_and_skips_nonfinite() -> None:
    x = torch.tensor([1.0, -1.0, 2.0])
    assert relative_noise(fingerprint(x), fingerprint(x.double())) == 0.0
    assert relative_noise(fingerprint(x), fingerprint(x.double() * 1.01)) == pytest.approx(0.01 / 1.01, rel=1e-6)
    assert relative_noise(fingerprint(torch.tensor([math.inf])), fingerprint(torch.tensor([1.0]))) is None


def test_float64_run_pairs_despite_extra_casts(tmp_path: Path) -> None:
    """The float64 run has a cast the float32 run has not; pairing skips it, noise is per tensor."""
    x = torch.linspace(-1, 1, 6)
    y32, y64 = torch.exp(x), torch.exp(x.double())
    a = TraceBuilder(tmp_path / "a.jsonl")
    a.op("aten::exp", [a.tensor("x", x)], [a.tensor("y", y32, "0")], src="m.py:2")
    a.op("aten::sum", [a.tensor("y", y32)], [a.tensor("s", y32.sum(), "0")], src="m.py:3")
    c = TraceBuilder(tmp_path / "c.jsonl")
    c.op("aten::exp", [c.tensor("x", x)], [c.tensor("y", y64, "0")], src="m.py:2")
    c.op("aten::_to_copy", [c.tensor("y", y64)], [c.tensor("y32", y64.float(), "0")], src="m.py:2")
    c.op("aten::sum", [c.tensor("y", y64)], [c.tensor("s", y64.sum(), "0")], src="m.py:3")
    noise = measure_noise(a.close(), c.close(), factor=10)
    assert noise.paired == 2 and noise.records == 2
    assert noise.get(0, "input", "self") == 0.0  # the same program input
    assert 0 < noise.get(0, "output", "0") < 1e-6 and noise.get(1, "output", "0") is not None


def test_upcast_computes_in_float64_with_the_same_parameters_and_random_numbers() -> None:
    def program() -> tuple[torch.Tensor, ...]:
        torch.manual_seed(0)
        lin = torch.nn.Linear(8, 8)  # empty + uniform_ init: must draw the same numbers
        x = torch.randn(4, 8)
        h = lin(x)
        d = torch.nn.functional.dropout(h, 0.5, training=True)  # random op on a computed value
        buf = torch.zeros(4, 8)
        buf[:, :4] = h[:, :4]  # slice assignment into a float32 tensor through a view
        return lin.weight, h, d, buf

    w32, h32, d32, buf32 = program()
    with Float64Upcast():
        w64, h64, d64, buf64 = program()
    assert w64.dtype == torch.float32 and torch.equal(w32, w64)
    assert h64.dtype == torch.float64 and torch.allclose(h64, h32.double(), rtol=1e-5)
    assert torch.equal(d64 != 0, d32 != 0)  # the same dropout mask
    assert buf64.dtype == torch.float32 and torch.count_nonzero(buf64[:, 4:]) == 0 and torch.allclose(buf64, buf32)


@pytest.fixture(scope="module")
def offset_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """offset_layernorm under aot_eager_decomp_partition, calibrated (3 recorded runs)."""
    out = tmp_path_factory.mktemp("offset")
    result = invoke("run", str(FIXTURES / "offset_layernorm.py"), "--backends", "eager,aot_eager_decomp_partition",
                    "--calibrate", "--out-dir", str(out), "--format", "json", TRACES_ONLY)
    return result.report, out


def test_calibration_removes_the_false_alarm_of_a_legitimate_reordering(offset_run) -> None:
    report, out = offset_run
    plain = invoke("diff", *report["traces"], "--format", "json")
    assert plain.exit_code == 1 and plain.report["first_divergence"]["source"].startswith("offset_layernorm.py")
    assert report["verdict"] == "match" and report["exit_code"] == 0
    calibration = report["calibration"]
    assert calibration["passed_by_noise"] > 0 and calibration["paired_records"] == calibration["records"]
    assert calibration["max_above_noise_passed"] < calibration["factor"]
    again = invoke("diff", *report["traces"], "--noise", calibration["noise_trace"], "--format", "json")
    assert again.exit_code == 0 and again.report["calibration"]["passed_by_noise"] == calibration["passed_by_noise"]
    header = json.loads((out / "n-eager-float64.jsonl").read_text().splitlines()[0])
    assert header["upcast"] == "float64"


def test_calibration_keeps_the_planted_fault(run_fixture) -> None:
    result = run_fixture("wrong_decomposition.py", "eager,wrong_decomposition:wrong_cos_backend", "--calibrate",
                         TRACES_ONLY)
    first = result.report["first_divergence"]
    assert result.exit_code == 1
    assert first["source"] == f"wrong_decomposition.py:{marker_line('wrong_decomposition.py', 'divergent line')}"
    assert first["tensor"]["above_noise"] > 1e4


@pytest.mark.slow
def test_calibration_keeps_the_fused_fault_and_removes_inductors_false_alarm(run_fixture) -> None:
    fused = run_fixture("perturbed_fusion.py", "eager,inductor", "--calibrate", TRACES_ONLY).report
    assert fused["verdict"] == "diverged" and fused["first_divergence"]["op"] == "aten::cos"
    assert fused["first_divergence"]["source"] == f"perturbed_fusion.py:{marker_line('perturbed_fusion.py', 'divergent line')}"
    assert fused["first_divergence"]["tensor"]["above_noise"] > 1e4
    offset = run_fixture("offset_layernorm.py", "eager,inductor", "--calibrate", TRACES_ONLY).report
    assert offset["verdict"] == "match" and offset["calibration"]["passed_by_noise"] > 0
    assert invoke("diff", *offset["traces"]).exit_code == 1  # the default tolerance alone: a false alarm


def test_calibrate_does_not_combine_with_repeat() -> None:
    result = invoke("run", str(FIXTURES / "clean_mlp.py"), "--backends", "eager", "--calibrate")
    assert result.exit_code == 2 and "--calibrate" in result.stderr


def test_an_adamw_step_runs_in_float64_with_float32_state() -> None:
    """`--calibrate` and narrowing's float64 run of a training step (the GPT-2 benchmark on CUDA):
    `zeros_like(param)` made float64 optimizer state, and `exp_avg.lerp_(grad)` refused the float32 grad."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    before = [p.detach().clone() for p in model.parameters()]
    with Float64Upcast():
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        opt.step()
    assert loss.dtype == torch.float64
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(s["exp_avg"].dtype == torch.float32 for s in opt.state.values())
    assert all(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_an_in_place_write_into_float32_reads_a_computed_value_as_float32() -> None:
    ema = torch.zeros(4)
    x = torch.linspace(0, 1, 8).reshape(2, 4)
    with Float64Upcast():
        ema.lerp_(x.mean(0), 0.5)  # the mean is computed in float64; lerp_ wants one dtype
    assert ema.dtype == torch.float32 and torch.allclose(ema, x.mean(0) * 0.5)


def test_a_tied_weight_update_runs_in_float64() -> None:
    """GPT-2's tied embedding: autograd sums the two gradients itself, so the float64 gradient is no
    value this mode computed, and AdamW's `exp_avg.lerp_(grad)` into float32 state must still run."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 8)
    head = torch.nn.Linear(8, 10, bias=False)
    head.weight = emb.weight
    opt = torch.optim.AdamW(emb.parameters(), lr=1e-2, foreach=False)
    with Float64Upcast():
        head(emb(torch.tensor([1, 2, 3]))).logsumexp(-1).mean().backward()
        opt.step()
    assert emb.weight.dtype == torch.float32 and opt.state[emb.weight]["exp_avg"].dtype == torch.float32


def test_float64_attention_runs_where_the_program_allows_only_a_fused_kernel() -> None:
    """H200, a bf16 block under `sdpa_kernel([FLASH_ATTENTION])`: the same-input judge's float64 reference raised
    "No available kernel" (flash, memory-efficient and cuDNN attention have no float64 kernel), so no call's
    gradients were judged. Inside the upcast the math kernel is allowed; outside, the program's choice stands."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 8, 4, dtype=torch.float64, requires_grad=True)
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        with Float64Upcast(exact_casts=True):
            torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()
        assert q.grad is not None and not torch.backends.cuda.math_sdp_enabled()


def test_a_higher_order_operator_computes_in_float64_under_the_upcast() -> None:
    """The graph dynamo captures from flex_attention calls it as a higher-order operator, which raised
    NotImplementedError in the same-input judge's float64 reference (this mode, running that graph): no call of
    a graph using it was judged."""
    from torch.nn.attention.flex_attention import flex_attention

    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: list) -> torch.fx.GraphModule:
        graphs.append(gm)
        return gm

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    torch.compile(lambda q, k, v: flex_attention(q, k, v), backend=keep)(q, k, v)
    (graph,) = graphs
    exact = graph(q.double(), k.double(), v.double())
    with Float64Upcast(exact_casts=True):
        got = graph(q, k, v)
    assert got[0].dtype == torch.float64
    torch.testing.assert_close(got, exact)


def test_functions_that_check_one_dtype_before_dispatch_compute_in_float64() -> None:
    """`--calibrate` on a channels-last ResNet (and any CNN with a biased convolution after a computed value) failed
    its float64 run with "Input type (double) and bias type (float) should be the same": that check, prelu's,
    bilinear's, attention's and nn.LSTM's come before any dispatch mode sees the call. Each now runs, with the
    program's float32 parameters unchanged and their gradients float32."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    prelu, lstm, gru = torch.nn.PReLU(4), torch.nn.LSTM(4, 4, batch_first=True), torch.nn.GRU(4, 4, batch_first=True)
    key = torch.randn(1, 5, 4)  # a float32 tensor meeting a computed float64 query in attention
    x = torch.randn(2, 3, 6, 6)

    def program() -> list[torch.Tensor]:
        h = prelu(conv(x.contiguous(memory_format=torch.channels_last)))  # contiguous: a computed copy
        seq = h.mean((2, 3)).unsqueeze(1).expand(2, 5, 4)
        attended = torch.nn.functional.scaled_dot_product_attention(seq, key, key)
        mixed = torch.nn.functional.bilinear(seq, seq, torch.ones(2, 4, 4), torch.zeros(2))
        return [h, attended, mixed, lstm(seq)[0], gru(seq)[0]]

    expected = program()
    with Float64Upcast():
        got = program()
        sum(t.sum() for t in got).backward()
    assert [t.dtype for t in got[:3]] == [torch.float64] * 3
    for want, have in zip(expected, got, strict=True):
        assert torch.allclose(have.float(), want, rtol=1e-4, atol=1e-5)
    assert conv.bias.dtype == torch.float32 and conv.bias.grad is not None and conv.bias.grad.dtype == torch.float32
    assert lstm.weight_ih_l0.grad is not None and lstm.weight_ih_l0.grad.dtype == torch.float32
    # Outside the upcast nothing stays changed: oneDNN back on, no hook left on RNN modules.
    assert torch.backends.mkldnn.enabled
    with pytest.raises(ValueError, match="RNN input dtype"):  # the program's own check, as without tracediff
        lstm(torch.randn(1, 5, 4, dtype=torch.float64))


def test_a_foreach_optimizer_step_reads_float64_gradients_into_float32_state() -> None:
    """H200, a bidirectional LSTM under `--calibrate`: the LSTM's weight gradients come out float64 in the float64
    run, and Adam's foreach step (CUDA's default) raised "expected dtype float for `end`" in `_foreach_lerp_`: the
    tensors it writes are lists, which the narrowing to the written dtype did not look into."""
    torch.manual_seed(0)
    emb, lstm = torch.nn.Embedding(10, 4), torch.nn.LSTM(4, 4, batch_first=True, bidirectional=True)
    params = [*emb.parameters(), *lstm.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3, foreach=True)
    with Float64Upcast():
        lstm(emb(torch.tensor([[1, 2, 3]])))[0].sum().backward()
        assert torch.float64 in {p.grad.dtype for p in params if p.grad is not None}
        opt.step()
    assert all(p.dtype == torch.float32 and opt.state[p]["exp_avg"].dtype == torch.float32 for p in params)


def test_torch_cond_branches_on_float32_parameters_compute_in_float64() -> None:
    """`control_flow.py` under `--calibrate`: `torch.cond` reached this mode as an operator and ran with it off, so
    its branch's `linear(float64 input, float32 weight)` raised "mat1 and mat2 must have the same dtype"."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)

    def program() -> torch.Tensor:
        h = x * 1  # computed: float64 under the upcast
        return torch.cond(h.sum() > 0, lambda t: a(t).relu(), lambda t: b(t).tanh(), (h,))

    expected = program()
    with Float64Upcast():
        got = program()
    assert got.dtype == torch.float64 and torch.allclose(got.float(), expected, rtol=1e-5, atol=1e-6)


def test_a_deep_copy_keeps_float32_and_a_chain_of_float64_math_stays_known_as_float32() -> None:
    """Found by `--calibrate` on real programs: an EMA teacher made by `copy.deepcopy` became float64 (a clone was
    widened), and `_foreach_lerp_(teacher, student)` raised "expected dtype double for `end`"; QAT's scale
    `w.abs().amax(1) / 127` was not known as a float32 value past its first op, so `fake_quantize_per_channel_affine`
    got it in float64 ("Scale must be Float or BFloat16, found Double")."""
    import copy

    torch.manual_seed(0)
    student = torch.nn.Linear(4, 3)
    with Float64Upcast() as upcast:
        teacher = copy.deepcopy(student)
        assert teacher.weight.dtype == torch.float32 and torch.equal(teacher.weight, student.weight)
        assert student.weight.new_empty(3).dtype == torch.float32  # the program's dtype, as `empty_like`
        with torch.no_grad():
            torch._foreach_lerp_(list(teacher.parameters()), list(student.parameters()), 0.1)
        scale = student.weight.detach().abs().amax(1).clamp_min(1e-8) / 127
        assert scale.dtype == torch.float64 and upcast._program_dtype[scale] == torch.float32
        quantized = torch.fake_quantize_per_channel_affine(
            student.weight, scale, torch.zeros_like(scale, dtype=torch.int32), 0, -128, 127)
    assert quantized.dtype == torch.float32


def test_attention_without_dropout_on_a_view_and_a_float32_cache_and_a_gradient_hook_run() -> None:
    """Found by `--calibrate` on real programs: a decoder's `sdpa(q.transpose(1, 2), cache_k, cache_v)` raised
    "expected scalar type Double but found Float" (attention counts as random, so it ran in the program's dtypes,
    and a view of a computed value was not known as one); a gradient hook `lambda g: -g` raised "hook has changed
    the type of value" (its result computed in float64 from autograd's float32 gradient)."""
    torch.manual_seed(0)
    cache = torch.zeros(1, 2, 4, 3)
    w = torch.randn(3, 3, requires_grad=True)

    def program() -> tuple[torch.Tensor, torch.Tensor]:
        q = torch.randn(1, 4, 2, 3) @ w  # computed; its transpose is a view of it
        att = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), cache + 1, cache)
        h = w * 2
        h.register_hook(lambda g: -g)
        (att.sum() + h.sum()).backward()
        grad, w.grad = w.grad, None
        return att, grad

    expected = program()
    with Float64Upcast():
        got = program()
    assert got[0].dtype == torch.float64 and torch.allclose(got[0].float(), expected[0], atol=1e-6)
    assert torch.allclose(got[1].float(), expected[1], atol=1e-5)  # through the hook, as the program's



class _CudasSoftmaxChecks(TorchDispatchMode):
    """CUDA's softmax kernels' dtype checks, on any device: the backward's gradient is in `input_dtype`, and the
    forward converts only a half input to float."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        aten = torch.ops.aten
        if func in (aten._log_softmax_backward_data.default, aten._softmax_backward_data.default):
            assert args[0].dtype == args[3], f"expected input and grad types to match: {args[0].dtype}, {args[3]}"
        if func in (aten._log_softmax.default, aten._softmax.default) and args[2]:
            assert args[0].dtype == torch.float16, "conversion is supported for Half type only"
        return func(*args, **(kwargs or {}))


def test_softmax_backward_runs_in_float64_where_cuda_checks_its_dtypes() -> None:
    """A bf16-autocast GPT-2's loss on an H200: the float64 run's softmax backward got float64 gradients with
    `input_dtype` float32, which CUDA refuses; a half softmax to float sets `half_to_float`, for half inputs only."""
    logits = torch.randn(4, 5, requires_grad=True)
    half = torch.randn(4, 5).half()
    with _CudasSoftmaxChecks(), Float64Upcast():
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 3]))
        loss.backward()
        probabilities = torch.ops.aten._softmax.default(half, 1, True)
    assert loss.dtype == torch.float64 and logits.grad is not None and logits.grad.dtype == torch.float32
    assert probabilities.dtype == torch.float64
