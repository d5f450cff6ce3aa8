"""`tracediff fix`: the changes it knows, the plan it makes, and the search end to end on fast backends.

The inductor cases (precision casts, a module kept out of the compile) are in tests/test_fix_inductor.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.conftest import FIXTURES, invoke
from tests.fix_helpers import patched_copy
from tracediff.fix.apply import FixApplier
from tracediff.fix.changes import (
    DISABLE_MODULE,
    DROP_DECOMPOSITION,
    DROP_PASS,
    FALLBACK,
    FLOAT32_MODULE,
    INDUCTOR_CONFIG,
    MATMUL_PRECISION,
    NO_COMPILE,
    Change,
    decode,
    encode,
)
from tracediff.fix.plan import module_chain, plan
from tracediff.fix.search import compiled_name
from tracediff.outcome import Cause, Divergence, Site, TensorEvidence


def _divergence(op: str = "aten::cos", module: str | None = "Net.block.act", dtype: str = "float32",
                candidates: tuple[str, ...] = ()) -> Divergence:
    site = Site(op, 4, "m.py:3", module, "y = torch.cos(h)")
    tensor = TensorEvidence("output", "0", dtype, (4,), {}, {}, 0.5, "l2", 1e-4, 1e-6, "", None, None)
    return Divergence(Cause.OUTPUT, site, 0.5, (site, *(Site(c, 5, "m.py:4", module, "") for c in candidates)),
                      "value", "m.py", True, False, "", None, None, tensor, rule="inputs_agree_outputs_differ")


def test_changes_travel_to_the_child_as_json_and_refuse_unknown_kinds() -> None:
    changes = [Change(DROP_DECOMPOSITION, "aten::cos"), Change(INDUCTOR_CONFIG, "emulate_precision_casts", True)]
    assert decode(encode(changes)) == changes
    with pytest.raises(ValueError, match="unknown change kind"):
        decode('[{"kind": "rm -rf"}]')


def test_each_change_prints_python_naming_the_op_overload_and_the_compiled_module() -> None:
    assert Change(DROP_DECOMPOSITION, "aten::cos").patch()[-1].startswith(
        "torch._inductor.decomposition.decompositions.pop(torch.ops.aten.cos.default, None)")
    assert "make_fallback(torch.ops.aten.add.Tensor, warn=False, override_decomp=True)" in Change(
        FALLBACK, "aten::add.Tensor").patch()[-1]
    assert Change(DISABLE_MODULE, "Net.block.act").patch("net")[0].startswith(
        "net.block.act.forward = torch.compiler.disable(net.block.act.forward)")
    assert Change(DROP_PASS, "post_grad_custom_post_pass").patch()[-1] == \
        "torch._inductor.config.post_grad_custom_post_pass = None"


def test_the_plan_tries_the_scripts_own_decomposition_first_and_no_compile_last() -> None:
    changes = plan(_divergence(candidates=("aten::sin",)), "inductor",
                   {"decompositions": ["aten::cos"], "lowerings": [], "passes": ["post_grad_custom_post_pass"]},
                   on_cuda=False, settings={})
    kinds = [c.kind for c in changes]
    assert changes[0] == Change(DROP_DECOMPOSITION, "aten::cos")
    assert kinds.index(DROP_PASS) < kinds.index(FALLBACK) < kinds.index(DISABLE_MODULE) < kinds.index(NO_COMPILE)
    assert [c.target for c in changes if c.kind == FALLBACK] == ["aten::cos", "aten::sin"]
    assert [c.target for c in changes if c.kind == DISABLE_MODULE] == ["Net.block.act", "Net.block"]
    assert INDUCTOR_CONFIG not in kinds  # float32 values: precision casts change nothing
    assert [c.reach for c in changes] == sorted(c.reach for c in changes)


def test_precision_casts_are_tried_for_half_precision_values_and_only_under_inductor() -> None:
    half = _divergence(dtype="bfloat16")
    assert Change(INDUCTOR_CONFIG, "emulate_precision_casts", True) in plan(half, "inductor", {}, False, {})
    assert not any(c.kind in (INDUCTOR_CONFIG, FALLBACK) for c in plan(half, "aot_eager", {}, False, {}))
    assert module_chain("Net") == [] and module_chain(None) == []


def test_the_patch_names_what_the_script_compiles(tmp_path: Path) -> None:
    assert compiled_name(FIXTURES / "perturbed_submodule.py") == "model"
    assert compiled_name(FIXTURES / "fused_bf16_cancellation.py") == "shift"  # torch.compile(shift)(x)
    script = tmp_path / "s.py"
    script.write_text("import torch\nnet = torch.compile(Net().cuda())\n")
    assert compiled_name(script) == "net"


def test_a_registered_decomposition_that_is_wrong_is_dropped_and_the_patch_makes_run_match(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user_cache = tmp_path / "user-cache"
    user_cache.mkdir()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(user_cache))
    result = invoke("fix", str(FIXTURES / "inductor_wrong_decomposition.py"), "--backend",
                    "aot_eager_decomp_partition", "--out-dir", str(tmp_path / "out"), "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = result.report
    assert report["verdict"] == "diverged" and report["first_divergence"]["op"] == "aten::cos"
    fix = report["fix"]
    assert fix["change"] == {"kind": DROP_DECOMPOSITION, "target": "aten::cos", "value": None}
    assert fix["nature"] == "customization" and fix["ms_per_call"] is not None and fix["baseline_ms_per_call"]
    assert [a["verdict"] for a in report["attempts"]] == ["match"]
    assert report["attempts"][0]["seconds"] > 0
    assert "fix 1/" in result.stderr and "timing" in result.stderr  # progress on stderr
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(user_cache) and not any(user_cache.iterdir())
    script = patched_copy("inductor_wrong_decomposition.py", fix["patch"], tmp_path, ("fault_cos_as_sin.py",))
    rerun = invoke("run", str(script), "--backends", "eager,aot_eager_decomp_partition", "--out-dir",
                   str(tmp_path / "rerun"), "--format", "json")
    assert rerun.exit_code == 0 and rerun.report["verdict"] == "match", rerun.stdout
    unpatched = invoke("run", str(FIXTURES / "inductor_wrong_decomposition.py"), "--backends",
                       "eager,aot_eager_decomp_partition", "--out-dir", str(tmp_path / "unpatched"), "--format", "json")
    assert unpatched.exit_code == 1  # the patch, not the copy, is what makes it match


def test_a_clean_script_has_nothing_to_fix(tmp_path: Path) -> None:
    result = invoke("fix", str(FIXTURES / "clean_mlp.py"), "--backend", "aot_eager", "--out-dir", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert "nothing to fix" in result.stdout and "Fix:" not in result.stdout


def test_a_difference_no_compile_change_removes_exits_1_and_says_it_is_not_the_compilers(tmp_path: Path) -> None:
    """uninitialized.py folds garbage memory into its result: even uncompiled it differs from eager. (The traces'
    rules decide: each compiled call re-run on its own inputs reads the same memory as its references.)"""
    traces_only = tmp_path / "tracediff.yaml"
    traces_only.write_text("same_inputs: false\n")
    result = invoke("fix", str(FIXTURES / "uninitialized.py"), "--backend", "aot_eager", "--out-dir", str(tmp_path),
                    "--format", "json", "--config", str(traces_only))
    report = result.report
    assert result.exit_code == report["exit_code"] == 1 and report["fix"] is None
    assert [(a["change"]["kind"], a["verdict"]) for a in report["attempts"]] == [(NO_COMPILE, "diverged")]
    assert report["attempts"][0]["ms_per_call"] is not None
    assert any("not the compiler's" in note for note in report["notes"])


def test_a_budget_spent_before_a_change_works_exits_1_and_says_so(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two changes planned, one run allowed: the first does not work (no such module), the search stops. (The
    traces' rules decide: uninitialized memory makes the runs differ, while each compiled call re-run on its own
    inputs reads the same memory as its references.)"""
    import tracediff.fix.search as search

    monkeypatch.setattr(search, "plan", lambda *args: [Change(DISABLE_MODULE, "Nothing.here"), Change(NO_COMPILE)])
    traces_only = tmp_path / "tracediff.yaml"
    traces_only.write_text("same_inputs: false\n")
    result = invoke("fix", str(FIXTURES / "uninitialized.py"), "--backend", "aot_eager", "--max-runs", "1",
                    "--out-dir", str(tmp_path), "--format", "json", "--config", str(traces_only))
    report = result.report
    assert result.exit_code == 1 and report["fix"] is None
    assert [a["change"]["kind"] for a in report["attempts"]] == [DISABLE_MODULE]
    assert "--max-runs 1 reached after 1 of 2 changes" in report["fix_stopped"]
    assert "could not make the change: compile disabled on module Nothing.here" in \
        Path(report["attempts"][0]["trace"]).with_suffix(".log").read_text()


def test_fix_refuses_eager_as_the_backend(tmp_path: Path) -> None:
    result = invoke("fix", str(FIXTURES / "clean_mlp.py"), "--backend", "eager", "--out-dir", str(tmp_path))
    assert result.exit_code == 2 and "must be a compile backend" in result.stderr


def test_full_precision_matmuls_are_tried_on_cuda_and_verified_against_eager_with_them_too() -> None:
    matmul = _divergence(op="aten::mm")
    assert Change(MATMUL_PRECISION) in plan(matmul, "inductor", {}, on_cuda=True, settings={})
    assert Change(MATMUL_PRECISION) not in plan(matmul, "inductor", {}, on_cuda=False, settings={})
    # the patch sets torch's precision, which eager obeys too: the reference is re-recorded with it
    assert Change(MATMUL_PRECISION).changes_eager
    assert not any(Change(kind, "aten::mm").changes_eager for kind in (DROP_DECOMPOSITION, FALLBACK, DISABLE_MODULE))


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


def test_a_module_kept_in_float32_under_autocast_by_the_child_and_by_the_printed_patch() -> None:
    """Both ways of making the change (the child's, and the lines a user pastes) compute the module in
    float32 inside a bf16 autocast region, as the module would outside it."""
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    change = Change(FLOAT32_MODULE, "_Net.block")
    assert change in plan(_divergence(module="_Net.block", dtype="bfloat16"), "aot_eager", {}, False, {})
    assert change.changes_eager and change.nature == "rounding"
    model = _Net()
    expected = model(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(x).dtype == torch.bfloat16
    FixApplier([change]).before_compile(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(model(x), expected)
    pasted = _Net()
    pasted.load_state_dict(model.state_dict())
    widened = pasted(x.bfloat16().float())  # a bf16 input is widened, not computed in bf16
    exec("\n".join(change.patch("pasted")), {"torch": torch, "pasted": pasted})  # noqa: S102 - the patch under test
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(pasted(x.bfloat16()), widened) and torch.equal(pasted(x), expected)


def test_module_changes_reach_a_module_compiled_by_its_compile_method() -> None:
    """`model.compile()` hands torch.compile the bound `_call_impl`: the change still finds `model.block`."""
    model = _Net()
    FixApplier([Change(DISABLE_MODULE, "_Net.block")]).before_compile(model._call_impl)
    assert getattr(model.block.forward, "_torchdynamo_disable", False)
    other = _Net()
    FixApplier([Change(DISABLE_MODULE, "Other.block")]).before_compile(other)  # another root: left alone
    assert not getattr(other.block.forward, "_torchdynamo_disable", False)
