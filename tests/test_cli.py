"""The CLI end to end on the bundled fixtures: verdicts, JSON contract, exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES, Result, invoke, marker_line

WRONG = "wrong_decomposition:wrong_cos_backend"
CONTRACT_KEYS = {"kind", "op", "index", "source", "module", "rel_diff", "candidates"}


def _one_line_error(result: Result, needle: str) -> None:
    assert result.exit_code == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.stderr


def test_wrong_decomposition_is_localized_to_the_cos_line(run_fixture) -> None:
    result = run_fixture("wrong_decomposition.py", f"eager,{WRONG}")
    report = result.report
    assert result.exit_code == 1 and report["verdict"] == "diverged" and report["exit_code"] == 1
    first = report["first_divergence"]
    assert CONTRACT_KEYS <= set(first)
    assert first["kind"] == "output"
    assert first["op"] == "aten::cos"
    assert first["source"] == f"wrong_decomposition.py:{marker_line('wrong_decomposition.py', 'divergent line')}"
    assert first["candidates"] == [{k: first[k] for k in ("op", "index", "source", "module")} | {"code": first["code"]}]
    assert first["rel_diff"] > 1e-2
    assert len(report["traces"]) == 2 and all(Path(t).is_file() for t in report["traces"])


def test_diff_of_saved_traces_gives_the_same_verdict(run_fixture) -> None:
    report = run_fixture("wrong_decomposition.py", f"eager,{WRONG}").report
    again = invoke("diff", *report["traces"], "--format", "json")
    assert again.exit_code == 1
    for key in ("op", "index", "source", "module", "kind"):
        assert again.report["first_divergence"][key] == report["first_divergence"][key]


def test_text_report_names_op_and_line(run_fixture) -> None:
    report = run_fixture("wrong_decomposition.py", f"eager,{WRONG}").report
    text = invoke("diff", *report["traces"])
    assert text.exit_code == 1
    assert "DIVERGED" in text.stdout and "aten::cos" in text.stdout
    assert "torch.cos(h)" in text.stdout


def test_clean_mlp_matches_under_aot_eager(run_fixture) -> None:
    result = run_fixture("clean_mlp.py", "eager,aot_eager")
    assert result.exit_code == 0, result.stdout
    assert result.report["verdict"] == "match" and result.report["compiled"] is True
    assert result.report["compared"] > 50


def test_run_that_raises_in_one_backend_is_failed(run_fixture) -> None:
    result = run_fixture("raises_when_compiled.py", "eager,aot_eager")
    report = result.report
    assert result.exit_code == 3 and report["verdict"] == "failed" and report["exit_code"] == 3
    run_a, run_b = report["runs"]
    assert run_a["failure"] is None
    assert "raised" in run_b["failure"]
    assert report["compared"] > 0  # how far it got: what matched until then


def test_script_that_never_compiles_says_so(run_fixture) -> None:
    report = run_fixture("no_compile.py", "eager,aot_eager").report
    assert report["compiled"] is False
    assert any("never reached torch.compile" in note for note in report["notes"])


def test_nan_producer_names_the_nan_line_in_both_runs(run_fixture) -> None:
    report = run_fixture("nan_producer.py", "eager,aot_eager").report
    line = marker_line("nan_producer.py", "nan line")
    assert report["verdict"] == "match"
    assert report["nan_origin"]["a"]["source"] == f"nan_producer.py:{line}"
    assert report["nan_origin"]["b"]["source"] == f"nan_producer.py:{line}"


def test_record_then_show(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    result = invoke("record", str(FIXTURES / "wrong_decomposition.py"), "--backend", "aot_eager", "-o", str(trace))
    assert result.exit_code == 0, result.stderr
    shown = invoke("show", str(trace))
    assert shown.exit_code == 0
    line = marker_line("wrong_decomposition.py", "divergent line")
    assert f"wrong_decomposition.py:{line}" in shown.stdout
    assert "aten::cos" in shown.stdout
    only_cos = invoke("show", str(trace), "--op", "cos")
    assert "aten::cos" in only_cos.stdout and "aten::relu" not in only_cos.stdout


def test_record_of_a_raising_script_keeps_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    result = invoke("record", str(FIXTURES / "raises_when_compiled.py"), "--backend", "aot_eager", "-o", str(trace))
    assert result.exit_code == 3
    shown = invoke("show", str(trace))
    assert shown.exit_code == 0 and "raised" in shown.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["diff", "missing-a.jsonl", "missing-b.jsonl"], "no such file"),
        (["show", "missing.jsonl"], "no such file"),
        (["run", "no_such_script.py", "--backends", "eager,aot_eager"], "no such script"),
        (["run", str(FIXTURES / "clean_mlp.py"), "--backends", "eager,aot_eager,inductor"], "two names"),
        (["run", str(FIXTURES / "clean_mlp.py"), "--backends", "eager", "--repeat", "1"], "--repeat 2"),
        (["run", str(FIXTURES / "clean_mlp.py"), "--repeat", "0"], "at least 1"),
        (["nan", "a.jsonl", "b.jsonl", "c.jsonl"], "one or two traces"),
        (["run", str(FIXTURES / "clean_mlp.py"), "--backends", "eager,not_a_backend"], "unknown backend"),
        (["show", str(FIXTURES / "clean_mlp.py")], "not a trace file"),
        (["show", str(FIXTURES / "clean_mlp.py"), "--range", "x:y"], ""),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    _one_line_error(invoke(*args), needle)


def test_garbage_and_wrong_schema_traces(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(bytes(range(256)) * 4)
    old = tmp_path / "old.jsonl"
    old.write_text('{"t": "header", "schema": 0}\n{"t": "footer", "complete": true}\n')
    _one_line_error(invoke("diff", str(garbage), str(old)), "not a trace file")
    _one_line_error(invoke("diff", str(old), str(old)), "schema version 0")


def test_custom_backend_that_does_not_import(tmp_path: Path) -> None:
    result = invoke("run", str(FIXTURES / "clean_mlp.py"), "--backends", "eager,nosuchmodule:backend",
                    "--out-dir", str(tmp_path))
    _one_line_error(result, "cannot import module 'nosuchmodule'")


def test_record_honours_the_config_and_the_command_line_wins(tmp_path: Path) -> None:
    from tracediff.trace.reader import Trace

    config = tmp_path / "tracediff.yaml"
    config.write_text("seed: 7\nexact: true\n")
    trace = tmp_path / "t.jsonl"
    assert invoke("record", str(FIXTURES / "no_compile.py"), "-o", str(trace), "--config", str(config)).exit_code == 0
    assert (Trace(trace).header["seed"], Trace(trace).header["exact"]) == (7, True)
    assert invoke("record", str(FIXTURES / "no_compile.py"), "-o", str(trace), "--config", str(config),
                  "--seed", "3").exit_code == 0
    assert Trace(trace).header["seed"] == 3


def test_bad_config_file(tmp_path: Path) -> None:
    config = tmp_path / "tracediff.yaml"
    config.write_text("tolerances:\n  float32: {rtl: 1}\n")
    trace = tmp_path / "t.jsonl"
    invoke("record", str(FIXTURES / "no_compile.py"), "-o", str(trace))
    _one_line_error(invoke("diff", str(trace), str(trace), "--config", str(config)), "unknown key 'rtl'")


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["clean_transformer.py", "clean_cnn.py", "clean_mlp.py"])
def test_clean_models_match_under_inductor(run_fixture, fixture: str) -> None:
    result = run_fixture(fixture, "eager,inductor")
    assert result.exit_code == 0, result.stdout
    assert result.report["verdict"] == "match"
    assert result.report["compiled"] is True


def test_the_unknown_backend_message_lists_the_backends_people_use() -> None:
    result = invoke("run", str(FIXTURES / "clean_mlp.py"), "--backends", "eager,not_a_backend")
    _one_line_error(result, "unknown backend")
    assert "inductor" in result.stderr and "aot_eager" in result.stderr and "TESTING_ONLY" not in result.stderr


def test_a_script_that_does_not_compile_is_one_line_before_any_run(tmp_path: Path) -> None:
    script = tmp_path / "typo.py"
    script.write_text("import torch\nx = torch.randn(3)\nif x.sum() > 0\n    print(x)\n")
    result = invoke("run", str(script), "--backends", "eager,aot_eager", "--out-dir", str(tmp_path / "out"))
    _one_line_error(result, f"{script}:3: SyntaxError: expected ':'")
    assert not (tmp_path / "out").exists()  # nothing was recorded


def test_a_script_that_exits_before_its_work_is_said_so(tmp_path: Path) -> None:
    script = tmp_path / "early_exit.py"
    script.write_text("import sys\nimport torch\nsys.exit(0)\ntorch.compile(torch.sin)(torch.randn(3))\n")
    report = invoke("run", str(script), "--backends", "eager,aot_eager", "--out-dir", str(tmp_path / "out"),
                    "--format", "json").report
    assert report["verdict"] == "match"
    assert any("neither run recorded any tensor op" in note for note in report["notes"])
    assert not any("same program" in note for note in report["notes"])
