"""Narrowing a fused divergence: when to narrow, what the unfused run says (fast), end to end (slow)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import TRACES_ONLY, child_command, marker_line
from tests.synth import TraceBuilder
from tracediff.diff.fusion import PRECISION, UNKNOWN, WRONG_RESULT, judge
from tracediff.outcome import Outcome
from tracediff.record.fingerprints.fingerprint import fingerprint
from tracediff.run.narrow import feeds_a_candidate, judge_unfused, needs_narrowing, runs_generated_kernels

# -- when to narrow: from B's trace, not the backend's name ------------------------------


def _trace(path: Path, kernels: int | None, kernel_record: bool) -> Path:
    """A trace with (or without) a kernel record; `kernels`: the footer's count, None for a footer without it."""
    builder = TraceBuilder(path, backend="my_backends:compile_with_inductor")
    x = builder.tensor("x", torch.ones(3))
    builder.op("aten::sin", [x], [builder.tensor("y", torch.ones(3).sin())])
    if kernel_record:
        builder.writer.write({"t": "kernel", "i": builder.seq, "name": "cpp_fused_cos_sin_0", "site": None, "g": "g",
                              "d": 1, "m": "Net", "fuses": [{"node": "sin", "op": "aten::sin"}], "in": [], "out": []})
        builder.seq += 1
    footer: dict[str, Any] = {"ops": 1, "compile_calls": 1, "error": None}
    if kernels is not None:
        footer["kernels"] = kernels
    builder.writer.close(footer)
    return path


def _diverged(candidates: int, may_start_earlier: bool = False) -> Outcome:
    cands = [{"op": f"aten::op{i}", "index": i, "source": "m.py:1", "module": None} for i in range(candidates)]
    first = dict(cands[-1], kind="output", candidates=cands, may_start_earlier=may_start_earlier)
    return Outcome.from_json({"verdict": "diverged", "first_divergence": first})


def test_a_custom_backend_that_ran_generated_kernels_is_narrowed(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "b.jsonl", kernels=1, kernel_record=True)
    assert runs_generated_kernels(trace)
    assert needs_narrowing(_diverged(3), trace)


def test_a_run_without_generated_kernels_is_not_narrowed(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "b.jsonl", kernels=0, kernel_record=False)
    assert not needs_narrowing(_diverged(3), trace)


def test_one_candidate_needs_no_narrowing(tmp_path: Path) -> None:
    assert not needs_narrowing(_diverged(1), _trace(tmp_path / "b.jsonl", kernels=1, kernel_record=True))


def test_a_region_output_that_differs_where_no_compared_value_did_is_narrowed(tmp_path: Path) -> None:
    """H100, an MLP's first `mm` perturbed before a layer norm: fused kernels carry the change within
    the tolerance at every compared value until the region's output; one kernel per op shows it."""
    unseen = Outcome.from_json({"verdict": "diverged", "first_divergence": {
        "kind": "output", "op": "region exit Net.forward (call 0)", "index": 9, "source": None,
        "candidates": [{"index": 9}]}})
    assert needs_narrowing(unseen, _trace(tmp_path / "b.jsonl", kernels=1, kernel_record=True))
    assert not needs_narrowing(unseen, _trace(tmp_path / "c.jsonl", kernels=0, kernel_record=False))


def test_one_candidate_whose_difference_may_start_earlier_is_narrowed(tmp_path: Path) -> None:
    """H100, an MLP's fc1 bias scaled 1% inside a fused kernel, its layer norm hiding most of it: the
    difference grew from below the tolerance at a later line. Materialized intermediates may show
    where it was made."""
    unsure = _diverged(1, may_start_earlier=True)
    assert needs_narrowing(unsure, _trace(tmp_path / "b.jsonl", kernels=1, kernel_record=True))
    assert not needs_narrowing(unsure, _trace(tmp_path / "c.jsonl", kernels=0, kernel_record=False))


def test_a_footer_without_the_count_is_read_for_kernel_records(tmp_path: Path) -> None:
    assert runs_generated_kernels(_trace(tmp_path / "b.jsonl", kernels=None, kernel_record=True))
    assert not runs_generated_kernels(_trace(tmp_path / "c.jsonl", kernels=None, kernel_record=False))


def test_an_unreadable_trace_runs_no_kernels(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert not runs_generated_kernels(bad)


# -- what the unfused run says ------------------------------------------------------------

def _cand(index: int, op: str) -> dict[str, Any]:
    return {"op": op, "index": index, "source": f"m.py:{index}", "module": "Net"}


# A's ops 16..19 as in fixtures/perturbed_layernorm.py: view, add, native_layer_norm, view.
FUSED = [_cand(16, "aten::view"), _cand(17, "aten::add.Tensor"), _cand(18, "aten::native_layer_norm"),
         _cand(19, "aten::view")]
VIEWS = {16, 19}


def _moves(index: int) -> bool:
    return index in VIEWS


def _found(*cands: dict[str, Any], inputs_agree: bool = False) -> dict[str, Any]:
    return dict(cands[-1], candidates=list(cands), inputs_agree=inputs_agree)


def test_a_decomposed_op_and_a_view_pin_the_op() -> None:
    # The GPT-2 ln_2 case: the unfused run leaves the layer norm and the view that reads it.
    outcome = judge_unfused(_found(FUSED[2], FUSED[3]), FUSED, _moves)
    assert outcome.result == "pinned"
    assert outcome.pinned == FUSED[2] and outcome.pinned_by == "position"


def test_one_op_whose_inputs_agree_is_pinned_by_value() -> None:
    outcome = judge_unfused(_found(FUSED[1], inputs_agree=True), FUSED, _moves)
    assert (outcome.result, outcome.pinned, outcome.pinned_by) == ("pinned", FUSED[1], "value")


def test_a_view_alone_is_never_pinned_while_it_could_be_the_op_before() -> None:
    # Only views left: nothing computes, so the view may be named, but only as itself (not a computing op).
    outcome = judge_unfused(_found(FUSED[3]), FUSED, _moves)
    assert outcome.result == "pinned" and outcome.pinned == FUSED[3]


def test_fewer_computing_candidates_narrow() -> None:
    fused = [*FUSED, _cand(20, "aten::tanh")]
    outcome = judge_unfused(_found(FUSED[1], FUSED[2], FUSED[3]), fused, _moves)
    assert outcome.result == "narrowed" and outcome.computing == (17, 18)


def test_a_divergence_outside_the_fused_ops_moved() -> None:
    outcome = judge_unfused(_found(_cand(40, "aten::exp")), FUSED, _moves)
    assert outcome.result == "moved"


def test_one_computing_op_before_the_fused_ones_is_taken() -> None:
    # H100, BERT under inductor, a fault in the token-type embedding: fused with the add and layer
    # norm after it, the difference stayed within the tolerance until a later layer; unfused, the
    # embedding's own output shows it.
    embedding = _cand(3, "aten::embedding")
    outcome = judge_unfused(_found(embedding, inputs_agree=True), FUSED, _moves)
    assert (outcome.result, outcome.pinned, outcome.pinned_by) == ("earlier", embedding, "value")


def test_one_computing_op_feeding_a_fused_candidate_is_taken() -> None:
    # H100, HF GPT-2 training step: a pass scaled the `mm` of attention's `c_proj`, and inductor fused the
    # scaling with the residual add and `ln_2` (whose kernel also recomputes the embeddings: candidates
    # before it). The fused run saw c_proj's own output agree; unfused, B's change right after it shows.
    fused = [_cand(3, "aten::embedding"), *FUSED]
    c_proj = _cand(14, "aten::addmm")
    assert judge_unfused(_found(c_proj), fused, _moves).result == "moved"
    outcome = judge_unfused(_found(c_proj), fused, _moves, feeds=lambda index: index == 14)
    assert (outcome.result, outcome.pinned, outcome.pinned_by) == ("earlier", c_proj, "position")
    unsettled = dict(_found(c_proj), may_start_earlier=True)
    assert judge_unfused(unsettled, fused, _moves, feeds=lambda index: index == 14).pinned is None


def _record(index: int, reads: list[int], writes: list[int]) -> dict[str, Any]:
    return {"i": index, "in": [{"id": i, "v": 0} for i in reads], "out": [{"id": i, "v": 0} for i in writes]}


def test_a_value_read_by_a_fused_candidate_through_a_view_feeds_it() -> None:
    records = {14: _record(14, [1], [5]), 16: _record(16, [5], [6]), 17: _record(17, [6, 2], [7]),
               18: _record(18, [7], [8]), 19: _record(19, [8], [9]), 3: _record(3, [0], [2])}
    assert feeds_a_candidate(records, FUSED, _moves, 14)  # 16 is a view of its output, 17 reads that
    assert not feeds_a_candidate(records, FUSED, _moves, 19)  # the last candidate feeds none after it
    records[16] = _record(16, [4], [6])
    assert not feeds_a_candidate(records, FUSED, _moves, 14)


def test_the_one_op_both_runs_hold_is_pinned() -> None:
    # H100, HF GPT-2 under inductor, a fault in a residual add fused with the layer norm after it:
    # unfused, the add is named, with ops after the kernel as candidates too (the view and add of the
    # next block, where the difference grows past the tolerance). Before: `moved`, the fused verdict kept.
    later = [_cand(30, "aten::view"), _cand(31, "aten::add.Tensor")]
    outcome = judge_unfused(dict(FUSED[1], candidates=[FUSED[1], *later], inputs_agree=False), FUSED, _moves)
    assert (outcome.result, outcome.pinned, outcome.pinned_by, outcome.shared) == ("pinned", FUSED[1], "position", True)


def test_shared_ops_narrow_only_when_the_unfused_run_names_one_of_the_kernels_ops() -> None:
    # H100, a training step of HF GPT-2: unfused, the difference first shows in the backward and the
    # verdict names a backward op; one fused backward op among its candidates is no evidence.
    fused = [*FUSED, _cand(20, "aten::native_layer_norm_backward")]
    found = dict(_cand(40, "aten::mul.Tensor"), candidates=[_cand(40, "aten::mul.Tensor"), fused[-1]],
                 inputs_agree=False)
    assert judge_unfused(found, fused, _moves).result == "moved"
    found = dict(FUSED[1], candidates=[FUSED[1], FUSED[2], _cand(40, "aten::mul.Tensor")], inputs_agree=False)
    outcome = judge_unfused(found, [*fused, _cand(21, "aten::tanh")], _moves)
    assert (outcome.result, outcome.computing, outcome.shared) == ("narrowed", (17, 18), True)


def test_a_difference_that_grew_from_below_the_tolerance_pins_nothing() -> None:
    # H100, HF Llama under inductor, a fault in a q/k/v projection: unfused, the difference passes the
    # tolerance only at a later RMSNorm mul, reached through views; position alone named that mul.
    for found in (_found(FUSED[2], FUSED[3]), _found(_cand(3, "aten::embedding")),
                  dict(FUSED[1], candidates=[FUSED[1], _cand(31, "aten::add.Tensor")], inputs_agree=False)):
        outcome = judge_unfused(dict(found, may_start_earlier=True), FUSED, _moves)
        assert outcome.pinned is None and outcome.result in ("narrowed", "moved"), (found["op"], outcome)
    outcome = judge_unfused(_found(FUSED[2], FUSED[3]), FUSED, _moves)
    assert outcome.result == "pinned"  # the same, settled


def test_several_ops_before_the_fused_ones_are_no_answer() -> None:
    outcome = judge_unfused(_found(_cand(3, "aten::embedding"), _cand(4, "aten::mul.Tensor")), FUSED, _moves)
    assert outcome.result == "moved"


def test_the_same_computing_candidates_are_not_narrowed() -> None:
    outcome = judge_unfused(_found(*FUSED), FUSED, _moves)
    assert outcome.result == "moved"


def test_no_divergence_without_fusion_vanished() -> None:
    assert judge_unfused(None, FUSED, _moves).result == "vanished"


# -- precision or wrong result, from three fingerprints -----------------------------------

EXACT = torch.linspace(-3, 3, 257, dtype=torch.float64).sin()


def _fp(values: torch.Tensor) -> dict[str, Any]:
    return fingerprint(values)


def test_fused_as_close_to_float64_as_eager_is_precision() -> None:
    eager = EXACT.float()
    fused = (EXACT + 1e-7 * torch.randn(257, dtype=torch.float64, generator=torch.Generator().manual_seed(0))).float()
    effect = judge(_fp(eager), _fp(fused), _fp(EXACT), "float32")
    assert effect.effect == PRECISION, effect


def test_fused_closer_to_float64_than_eager_is_precision() -> None:
    eager = EXACT.to(torch.bfloat16)  # eager rounded an intermediate; fused kept it in float32
    effect = judge(_fp(eager.double()), _fp(EXACT.float().double()), _fp(EXACT), "bfloat16")
    assert effect.effect == PRECISION and effect.fused_error < effect.eager_error


def test_fused_far_from_float64_where_eager_is_close_is_a_wrong_result() -> None:
    wrong = EXACT.roll(1).float()  # an off-by-one index: every value is another element's
    wrong[0] = 5.0
    effect = judge(_fp(EXACT.float()), _fp(wrong), _fp(EXACT), "float32")
    assert effect.effect == WRONG_RESULT, effect
    assert effect.fused_error > 10 * effect.eager_error


def test_in_between_or_without_float64_is_unknown() -> None:
    eager = EXACT.float() * (1 + 1e-4)
    fused = EXACT.float() * (1 + 5e-4)
    assert judge(_fp(eager), _fp(fused), _fp(EXACT), "float32").effect == UNKNOWN
    assert judge(_fp(eager), _fp(fused), None, "float32").effect == UNKNOWN


# -- end to end: one inductor compile each ---------------------------------------------

def _assert_pinned_at_marker(result, fixture: str, op: str) -> dict:
    """Diverged, narrowing pinned `op` on the fixture's `divergent line`, and the report says how."""
    first = result.report["first_divergence"]
    assert result.exit_code == 1
    assert first["narrowing"]["result"] == "pinned"
    assert first["op"] == op
    assert first["source"] == f"{fixture}:{marker_line(fixture, 'divergent line')}"
    assert [c["op"] for c in first["candidates"]] == [op]
    assert first["pinned_by"] == first["narrowing"]["pinned_by"] in ("value", "position")
    return first


@pytest.mark.slow
def test_a_custom_backend_around_compile_fx_narrows_to_the_perturbed_op(run_fixture) -> None:
    result = run_fixture("perturbed_fusion.py", "eager,compile_fx_backend:my_backend", TRACES_ONLY)
    _assert_pinned_at_marker(result, "perturbed_fusion.py", "aten::cos")


@pytest.mark.slow
def test_a_perturbed_node_of_a_decomposed_layer_norm_is_pinned_to_the_layer_norm(run_fixture) -> None:
    result = run_fixture("perturbed_layernorm.py", "eager,inductor", TRACES_ONLY)
    first = _assert_pinned_at_marker(result, "perturbed_layernorm.py", "aten::native_layer_norm")
    narrowing = first["narrowing"]
    # The fused kernel held the views around the layer norm; with one kernel per op, the kernel
    # writing the layer norm's output pairs with it (on its first output): its inputs agree.
    assert {"aten::view", "aten::native_layer_norm"} <= {c["op"] for c in narrowing["fused_candidates"]}
    assert [c["op"] for c in narrowing["unfused_candidates"]] == ["aten::native_layer_norm"]
    assert narrowing["pinned_by"] == "value"


@pytest.mark.slow
def test_a_difference_only_fusion_makes_is_told_precision(run_fixture) -> None:
    result = run_fixture("fused_bf16_cancellation.py", "eager,inductor", TRACES_ONLY)
    first = result.report["first_divergence"]
    narrowing = first["narrowing"]
    assert result.exit_code == 1
    assert narrowing["result"] == "vanished"
    assert narrowing["fusion_effect"] == "precision"
    evidence = narrowing["fusion_evidence"]
    assert evidence["fused_error"] < evidence["eager_error"]
    assert any("precision difference of fusion" in note for note in result.report["notes"])
    assert first["source"] == f"fused_bf16_cancellation.py:{marker_line('fused_bf16_cancellation.py', 'fused line')}"


@pytest.mark.slow
def test_a_fault_only_in_fused_code_is_told_a_wrong_result(run_fixture) -> None:
    # --calibrate: its float64 run of the reference is the one judged against (no second one).
    result = run_fixture("wrong_only_when_fused.py", "eager,inductor", "--calibrate", TRACES_ONLY)
    report = result.report
    narrowing = report["first_divergence"]["narrowing"]
    assert result.exit_code == 1
    assert narrowing["result"] == "vanished"
    assert narrowing["fusion_effect"] == "wrong_result"
    evidence = narrowing["fusion_evidence"]
    assert evidence["fused_error"] > 10 * evidence["eager_error"]
    assert evidence["float64_trace"] == report["calibration"]["noise_trace"]
    assert any("wrong result of the fused kernel" in note for note in report["notes"])
    assert not any("precision of fused intermediates" in note for note in report["notes"])


def test_the_text_report_says_how_the_narrowing_ended() -> None:
    from tracediff.report.text import narrowing_outcome

    assert narrowing_outcome({"result": "pinned", "pinned_by": "position"}) == "pinned, by position"
    assert narrowing_outcome({"result": "vanished", "fusion_effect": "wrong_result"}) == \
        "vanished, fusion effect: wrong_result"
    assert narrowing_outcome({"result": "moved"}) == "moved"


def test_the_narrowing_rerun_keeps_torchs_cache_warning_to_itself(tmp_path: Path) -> None:
    """The re-run compiles each graph anew on purpose; torch's warning about disabled caches (`dynamo_pgo force
    disabled`, which `force_disable_caches` gave) is not the user's to read (issue 48)."""
    script = tmp_path / "sin.py"
    script.write_text("import torch\nprint(torch.compile(lambda x: torch.sin(x) * 2 + 1)(torch.randn(8)).sum())\n")
    done = subprocess.run(child_command(tmp_path / "t.jsonl", script, "inductor", materialize=True),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dynamo_pgo" not in done.stderr + done.stdout
