"""JUnit XML output: valid XML, one testcase, failure on divergence, error on a failed run."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tests.synth import TraceBuilder
from tests.test_report_html import _chain
from tracediff.config import Config
from tracediff.diff.decide import decide
from tracediff.diff.engine import diff_traces
from tracediff.report.junit import render_junit


def _report(tmp_path: Path, wrong_at: int | None) -> dict:
    a, b = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl", "custom")
    _chain(a, 12, None)
    _chain(b, 12, wrong_at)
    paths = [a.close(), b.close()]
    return decide(diff_traces(*paths, Config()), [str(p) for p in paths], Config()).to_json()


def _case(xml: str) -> tuple[ET.Element, ET.Element]:
    root = ET.fromstring(xml.encode("utf-8"))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    cases = suites[0].findall("testcase")
    assert len(cases) == 1
    return suites[0], cases[0]


def test_divergence_is_a_failure_with_the_text_report(tmp_path: Path) -> None:
    report = _report(tmp_path, wrong_at=5)
    suite, case = _case(render_junit(report))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "1", "0")
    failure = case.find("failure")
    assert failure is not None and case.find("error") is None
    assert "aten::cos #6" in failure.get("message") and "evil.py:7" in failure.get("message")
    # The body is the text report, source line included (escaped in the file, intact once parsed).
    assert "DIVERGED" in failure.text and '<script>alert("pwned")</script>' in failure.text
    assert case.get("name") == "eager vs custom"
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["verdict"] == "diverged" and props["op"] == "aten::cos" and props["index"] == "6"


def test_match_passes(tmp_path: Path) -> None:
    suite, case = _case(render_junit(_report(tmp_path, wrong_at=None)))
    assert (suite.get("failures"), suite.get("errors")) == ("0", "0")
    assert case.find("failure") is None and case.find("error") is None
    assert "MATCH" in case.find("system-out").text


def test_failed_run_is_an_error(tmp_path: Path) -> None:
    report = {
        "verdict": "failed", "exit_code": 3, "traces": ["a.jsonl", "b.jsonl"], "first_divergence": None,
        "runs": [{"backend": "eager", "failure": None},
                 {"backend": "inductor", "failure": "the script raised RuntimeError: boom \x1b[31m\x00"}],
        "notes": [],
    }
    suite, case = _case(render_junit(report))
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")
    error = case.find("error")
    assert error is not None and "run B: the script raised RuntimeError: boom" in error.get("message")
    assert "\x1b" not in error.get("message") and "FAILED" in error.text
