"""`tracediff record --same-inputs`: a compiled run recorded on its own (another host, a multi-node job) is judged
call by call on its own inputs as `run` judges its candidate, so `tracediff diff` gives the training-run verdict;
without it, a diff that finds a divergence says its verdict is the trace rules' alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, invoke

_SCRIPT = str(FIXTURES / "wrong_decomposition.py")
_WRONG = "wrong_decomposition:wrong_cos_backend"
_UNJUDGED = "not judged on their own inputs"


@pytest.mark.parametrize("options, needle", [
    ([], "--backend inductor"),
    (["--backend", "eager"], "--backend inductor"),
    (["--backend", "dynamo"], "--backend inductor"),
    (["--backend", "aot_eager", "--float64"], "one or the other"),
])
def test_same_inputs_needs_a_backend_that_compiles(tmp_path: Path, options: list[str], needle: str) -> None:
    result = invoke("record", _SCRIPT, "--same-inputs", *options, "-o", str(tmp_path / "t.jsonl"))
    assert result.exit_code == 2
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "t.jsonl").exists()


def _record(where: Path, name: str, *options: str) -> Path:
    trace = where / f"{name}.jsonl"
    result = invoke("record", _SCRIPT, *options, "-o", str(trace), "--timeout", "300")
    assert result.exit_code == 0, result.stderr
    return trace


def _diff(a: Path, b: Path) -> dict:
    result = invoke("diff", str(a), str(b), "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_a_compiled_run_recorded_with_same_inputs_is_judged_by_diff(tmp_path: Path) -> None:
    eager = _record(tmp_path, "eager", "--backend", "eager")
    judged_wrong = _diff(eager, _record(tmp_path, "wrong-judged", "--backend", _WRONG, "--same-inputs"))
    assert judged_wrong["verdict"] == "diverged"
    assert judged_wrong["same_inputs"]["first_wrong"] is not None
    assert judged_wrong["first_divergence"]["rule"] == "wrong_on_its_own_inputs"
    assert not any(_UNJUDGED in note for note in judged_wrong["notes"])

    judged_clean = _diff(eager, _record(tmp_path, "clean-judged", "--backend", "aot_eager", "--same-inputs"))
    assert judged_clean["verdict"] == "match" and judged_clean["same_inputs"]["calls"] >= 1

    unjudged_wrong = _diff(eager, _record(tmp_path, "wrong", "--backend", _WRONG))
    assert unjudged_wrong["verdict"] == "diverged" and unjudged_wrong.get("same_inputs") is None
    assert any(_UNJUDGED in note and f"--backend {_WRONG} --same-inputs" in note for note in unjudged_wrong["notes"])
