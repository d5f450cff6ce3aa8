"""Ops that amplify differences below the tolerance (diff/amplified.py), on hand-built traces.

The case behind it: AdamW's addcdiv_ on a parameter whose gradient is
mathematically zero (nn.MultiheadAttention's key bias) turns ~1e-9 rounding
noise, which differs by backend, into a visible step. That is no compiler
fault unless the difference reaches what a compiled region computes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.synth import TraceBuilder
from tracediff.config import Config
from tracediff.diff.compare import compare_fingerprints
from tracediff.diff.decide import decide
from tracediff.diff.engine import diff_traces
from tracediff.record.fingerprints.fingerprint import fingerprint

X = torch.linspace(-1, 1, 32).reshape(2, 16)
W = torch.linspace(0.5, 1.5, 256).reshape(16, 16)
LR = 0.1  # large, so that the amplified noise shows beyond the tolerance in what reads the bias


def _report(a: Path, b: Path) -> dict:
    config = Config()
    return decide(diff_traces(a, b, config), [str(a), str(b)], config).to_json()


def _exp_avg(seed: int, near_zero_only: bool) -> torch.Tensor:
    """Adam's first moment of a bias; its last 16 entries are a zero gradient's rounding noise (~1e-9),
    drawn per run. `near_zero_only`: the tensor is only that noise (so it agrees only within atol)."""
    noise = torch.randn(16, generator=torch.Generator().manual_seed(seed)) * 1e-9
    if near_zero_only:
        return noise
    return torch.cat([torch.linspace(1e-4, 2e-3, 32), noise])


def _region(builder: TraceBuilder, call: int, bias: torch.Tensor | None = None, fault: bool = False) -> None:
    """A compiled forward: y = sin(x @ W) (+ bias), the region's output."""
    t = builder.tensor
    builder.region("enter", [t("x", X, "in0")], call=call)
    h = X @ W
    builder.op("aten::mm", [t("x", X), t("W", W, "mat2")], [t(f"h{call}", h, "0")], src="m.py:10")
    s = torch.sin(h) * (1.01 if fault else 1.0)
    builder.op("aten::sin", [t(f"h{call}", h)], [t(f"s{call}", s, "0")], src="m.py:11")
    out = f"s{call}"
    if bias is not None:
        y = s + bias[-16:]
        builder.op("aten::add.Tensor", [t(f"s{call}", s), t("p1", bias, "other")], [t(f"y{call}", y, "0")],
                   src="m.py:12")
        out = f"y{call}"
        s = y
    builder.region("exit", [t(out, s, "out0")], call=call)


def _step(builder: TraceBuilder, m: torch.Tensor) -> torch.Tensor:
    """AdamW's update of a zero-initialised bias, run eagerly: p += -lr * m / (sqrt(v) + eps)."""
    t = builder.tensor
    p = torch.zeros_like(m)
    denom = m.abs() + 1e-8  # sqrt(m^2) + eps
    p1 = p.addcdiv(m, denom, value=-LR)
    builder.op("aten::addcdiv_", [t("p", p), t("m", m, "tensor1"), t("denom", denom, "tensor2")],
               [t("p1", p1, "0")], src="opt.py:41")
    return p1


def _program(builder: TraceBuilder, seed: int, near_zero_only: bool = True, reaches_exit: bool = False,
             fault: bool = False) -> Path:
    """forward (region), optimizer step (eager), forward again; the second reads the bias when `reaches_exit`."""
    _region(builder, 0)
    p1 = _step(builder, _exp_avg(seed, near_zero_only))
    _region(builder, 1, bias=p1 if reaches_exit else None, fault=fault)
    return builder.close()


def _pair(tmp_path: Path, **kwargs) -> dict:
    """The same program in A and B; only the zero gradient's rounding noise differs."""
    a = _program(TraceBuilder(tmp_path / "a.jsonl"), seed=0, **kwargs)
    b = _program(TraceBuilder(tmp_path / "b.jsonl", "inductor"), seed=1, **kwargs)
    return _report(a, b)


@pytest.mark.parametrize("near_zero_only", [True, False], ids=["inputs-within-atol", "eager-op-tight-inputs"])
def test_amplified_noise_that_reaches_no_region_output_is_a_match(tmp_path: Path, near_zero_only: bool) -> None:
    """Was: DIVERGED at aten::addcdiv_, "inputs agree, outputs differ"."""
    report = _pair(tmp_path, near_zero_only=near_zero_only)
    assert report["verdict"] == "match" and report["exit_code"] == 0, report["first_divergence"]
    note = next(n for n in report["notes"] if "amplified" in n)
    assert "1 value(s) differ only by amplified differences below the tolerance" in note
    assert "aten::addcdiv_ at opt.py:41" in note


def test_amplified_noise_reaching_a_region_output_diverges_at_the_amplifying_op(tmp_path: Path) -> None:
    report = _pair(tmp_path, reaches_exit=True)
    first = report["first_divergence"]
    assert first["rule"] == "amplified_noise_reaches_a_region"
    assert report["verdict"] == "diverged" and report["exit_code"] == 1
    assert (first["op"], first["source"], first["inputs_agree"]) == ("aten::addcdiv_", "opt.py:41", True)
    assert first["observed"]["op"] == "region exit Net.forward (call 1)"
    assert "agree only within the absolute tolerance" in first["note"]
    assert "ill-conditioned" in first["note"] and "a compiled region's output" in first["note"]


@pytest.mark.parametrize("reaches_exit", [False, True])
def test_a_real_fault_after_amplified_noise_is_still_found(tmp_path: Path, reaches_exit: bool) -> None:
    """sin computes 1% off in B; its input agrees exactly: an ordinary fault, blamed at its op."""
    a = _program(TraceBuilder(tmp_path / "a.jsonl"), seed=0, reaches_exit=reaches_exit)
    b = _program(TraceBuilder(tmp_path / "b.jsonl", "inductor"), seed=1, reaches_exit=reaches_exit, fault=True)
    first = _report(a, b)["first_divergence"]
    assert first["rule"] == "inputs_agree_outputs_differ"
    assert (first["op"], first["source"], first["inputs_agree"]) == ("aten::sin", "m.py:11", True)
    assert first["note"] == "inputs agree, outputs differ"


def test_a_compiled_op_fed_tight_noise_is_still_blamed(tmp_path: Path) -> None:
    """The eager-op sign holds only outside compiled regions: inside one, the op may be compiled wrong."""
    builders = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl", "inductor")
    for seed, builder in enumerate(builders):
        builder.region("enter", [builder.tensor("x", X, "in0")])
        _step(builder, _exp_avg(seed, near_zero_only=False))
        builder.region("exit", [builder.tensor("x", X, "out0")])
    first = _report(*(b.close() for b in builders))["first_divergence"]
    assert first["rule"] == "inputs_agree_outputs_differ"
    assert (first["op"], first["note"]) == ("aten::addcdiv_", "inputs agree, outputs differ")


def test_an_eager_op_with_identical_inputs_and_other_outputs_is_blamed(tmp_path: Path) -> None:
    """Outside compiled regions, the same values in and other values out: not amplification."""
    builders = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl", "inductor")
    for scale, builder in zip((1.0, 1.01), builders):
        _region(builder, 0)
        t = builder.tensor
        builder.op("aten::mul.Tensor", [t("W", W), t("W2", W, "other")], [t("WW", W * W * scale, "0")], src="opt.py:50")
    first = _report(*(b.close() for b in builders))["first_divergence"]
    assert first["rule"] == "inputs_agree_outputs_differ"
    assert (first["op"], first["source"], first["note"]) == ("aten::mul.Tensor", "opt.py:50", "inputs agree, outputs differ")


def _product_with_factor_off(relative_in: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (4 x 64), W (64 x 64), and x moved by `relative_in` of its norm along the direction W stretches
    most, x chosen so that most of x @ W cancels: the move shows larger, relative to x @ W (as attention's
    q k^T on CPU under inductor: factors 8.3e-5 off, scores 1.35e-4 off)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, generator=gen, dtype=torch.float64)
    w = torch.randn(64, 64, generator=gen, dtype=torch.float64)
    x = x - 0.9 * (x @ w) @ torch.linalg.pinv(w)  # most of x @ W cancelled away: a product of small norm
    direction = torch.linalg.svd(w).U[:, 0].expand(4, 64)  # each row along W's top left singular vector
    step = relative_in * x.norm() / direction.norm()
    return x.float(), (x + step * direction).float(), w.float()


def _product_program(builder: TraceBuilder, x: torch.Tensor, w: torch.Tensor, exit_with_product: bool,
                     product_fault: float = 1.0) -> Path:
    """A compiled region: x (computed inside it), h = x @ W; its exit is x or h."""
    t = builder.tensor
    builder.region("enter", [t("x0", X, "in0")])
    builder.op("aten::mul.Tensor", [t("x0", X), t("c", torch.ones(1), "other")], [t("x", x, "0")], src="m.py:9")
    h = (x @ w) * product_fault
    builder.op("aten::mm", [t("x", x), t("W", w, "mat2")], [t("h", h, "0")], src="m.py:10")
    builder.region("exit", [t("h", h, "out0") if exit_with_product else t("x", x, "out0")])
    return builder.close()


def _product_pair(tmp_path: Path, exit_with_product: bool, product_fault: float = 1.0) -> dict:
    x, moved, w = _product_with_factor_off(relative_in=6e-5)
    # The premise, on the fingerprints themselves: x agrees within the tolerance, x @ W is barely beyond it.
    tolerance = Config().tolerance_for("float32", "aten::mm", None)
    assert compare_fingerprints(fingerprint(x), fingerprint(moved), tolerance).ok
    out = compare_fingerprints(fingerprint(x @ w), fingerprint(moved @ w), tolerance)
    assert not out.ok and out.times_allowed < 2.0, out
    a = _product_program(TraceBuilder(tmp_path / "a.jsonl"), x, w, exit_with_product)
    b = _product_program(TraceBuilder(tmp_path / "b.jsonl", "inductor"), moved, w, exit_with_product, product_fault)
    return _report(a, b)


def test_a_product_amplifying_its_factors_differences_within_its_reach_is_a_match(tmp_path: Path) -> None:
    """Was (transformer_encoder.py under inductor on CPU): DIVERGED at bmm, barely beyond the tolerance."""
    report = _product_pair(tmp_path, exit_with_product=False)
    assert report["verdict"] == "match" and report["exit_code"] == 0, report["first_divergence"]
    note = next(n for n in report["notes"] if "amplified" in n)
    assert "aten::mm at m.py:10" in note and "a matrix product whose output differs by" in note


def test_a_product_amplifying_into_the_region_output_diverges_there(tmp_path: Path) -> None:
    """Reported as it was before the sign existed: where the factor's change came in below the tolerance (B's
    `mul` wrote x moved from inputs bitwise equal), the mm where it showed a candidate."""
    report = _product_pair(tmp_path, exit_with_product=True)
    first = report["first_divergence"]
    assert first["rule"] == "came_in_below_the_tolerance"
    assert report["exit_code"] == 1 and (first["op"], first["source"]) == ("aten::mul.Tensor", "m.py:9"), first
    assert "m.py:10" in [c["source"] for c in first["candidates"]] and first["may_start_earlier"] is True


def test_a_product_off_by_more_than_its_factors_can_make_is_blamed(tmp_path: Path) -> None:
    """The same factors, the product 1% off in B: far beyond the tolerance, an ordinary fault at the mm."""
    report = _product_pair(tmp_path, exit_with_product=False, product_fault=1.01)
    first = report["first_divergence"]
    assert first["rule"] == "inputs_agree_outputs_differ"
    assert report["exit_code"] == 1 and (first["op"], first["note"]) == ("aten::mm", "inputs agree, outputs differ")
