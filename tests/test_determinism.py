"""Determinism checks: two runs of one backend, advice per cause, --repeat."""

from __future__ import annotations

import pytest

from tests.conftest import marker_line
from tracediff.diff.determinism import determinism_advice
from tracediff.outcome import Cause, Divergence


def _first(op: str, cause: Cause = Cause.OUTPUT, **extra: object) -> Divergence:
    return Divergence.from_json({"kind": "output", "op": op, "index": 3, "source": "m.py:7", "module": "Net",
                                 "candidates": [], "inputs_agree": True, "note": "inputs agree, outputs differ",
                                 **extra}, cause)


@pytest.mark.parametrize(
    "first, cause, needle",
    [
        (_first("aten::empty.memory_format", Cause.UNINITIALIZED_MEMORY), "uninitialized_memory", "torch.zeros"),
        (_first("aten::add.Tensor", Cause.UNINITIALIZED_MEMORY,
                candidates=[{"op": "aten::empty_like", "source": "m.py:5", "module": None}]),
         "uninitialized_memory", "m.py:5"),
        (_first("aten::randn"), "random", "seeded torch, random and numpy with 0"),
        (_first("aten::bernoulli_.float"), "random", "generator"),
        (_first("aten::index_add_"), "nondeterministic_algorithm", "torch.use_deterministic_algorithms(True)"),
        (_first("aten::scatter_add.default"), "nondeterministic_algorithm", "CUBLAS_WORKSPACE_CONFIG"),
        (_first("aten::mul.Tensor", Cause.PROGRAM_INPUT, inputs_agree=False), "input",
         "outside torch's seeded generator"),
        (_first("aten::cos"), "nondeterministic_kernel", "use_deterministic_algorithms"),
    ],
)
def test_advice_fits_the_first_differing_op(first: Divergence, cause: str, needle: str) -> None:
    advice = determinism_advice(first, "eager", 0)
    assert advice["cause"] == cause
    assert needle in " ".join(advice["advice"])


def test_no_divergence_no_advice() -> None:
    assert determinism_advice(None, "eager", 0) == {"backend": "eager", "cause": None, "advice": []}


def test_uninitialized_memory_is_called_nondeterminism(run_fixture) -> None:
    """Two backends, two runs each: eager disagrees with itself at the torch.empty line."""
    result = run_fixture("uninitialized.py", "eager,aot_eager", "--repeat", "2")
    report = result.report
    assert result.exit_code == 1 and report["verdict"] == "diverged" and report["exit_code"] == 1
    line = marker_line("uninitialized.py", "uninitialized line")
    first = report["first_divergence"]
    assert {"kind", "op", "index", "source", "module", "rel_diff", "candidates"} <= set(first)
    assert first["source"] == f"uninitialized.py:{line}" and first["op"].startswith("aten::empty")
    assert report["determinism"]["cause"] == "uninitialized_memory"
    assert f"uninitialized.py:{line}" in report["determinism"]["advice"][0]
    # eager 1 vs 2, aot_eager 1 vs 2, eager vs aot_eager; the report is a determinism check (eager first)
    pairs = [(tuple(e["backends"]), tuple(e["runs"])) for e in report["repeat"]]
    assert pairs == [(("eager", "eager"), (1, 2)), (("aot_eager", "aot_eager"), (1, 2)),
                     (("eager", "aot_eager"), (1, 1))]
    assert report["repeat"][0]["verdict"] == "diverged" and report["traces"] == report["repeat"][0]["traces"]
    assert "run 2 of 2" in result.stderr and "eager run 1 vs run 2: DIVERGED" in result.stderr


def test_deterministic_script_passes_one_backend(run_fixture) -> None:
    result = run_fixture("clean_mlp.py", "eager")
    report = result.report
    assert result.exit_code == 0 and report["verdict"] == "match"
    assert [e["runs"] for e in report["repeat"]] == [[1, 2]] and report["repeat_count"] == 2
    assert report["determinism"]["cause"] is None
    assert not any("never reached torch.compile" in n for n in report["notes"])


def test_text_report_says_determinism_check(tmp_path) -> None:
    from tests.conftest import FIXTURES, invoke

    result = invoke("run", str(FIXTURES / "uninitialized.py"), "--backends", "eager,eager", "--out-dir", str(tmp_path))
    assert result.exit_code == 1
    assert "determinism check: two runs of the same configuration (backend eager)" in result.stdout
    assert "nondeterminism (uninitialized memory)" in result.stdout
