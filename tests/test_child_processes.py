"""Child processes (DataLoader workers, multiprocessing pools, os.fork) never write into the
parent's trace, the verdict stays right, and the report says the children were not recorded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import Result

# The script's children are the recording's: started as a user's run starts it (tests/recording_forks.py).
pytestmark = pytest.mark.fresh_children


def _lines(trace: str) -> list[dict]:
    return [json.loads(line) for line in Path(trace).read_text().splitlines()]


def _assert_only_the_parent(trace: str) -> dict:
    """One header, one footer, records numbered 0, 1, 2, ... in order; returns the footer."""
    lines = _lines(trace)
    kinds = [r["t"] for r in lines]
    assert kinds[0] == "header" and kinds[-1] == "footer", trace
    assert kinds.count("header") == 1 and kinds.count("footer") == 1, trace
    indices = [r["i"] for r in lines[1:-1] if r["t"] != "check"]  # a same-input check takes no index
    assert indices == list(range(len(indices))), trace
    return lines[-1]


def _printed(result: Result, pattern: str) -> list[list[str]]:
    """The script's printed lines matching `pattern`, per run (from the run logs)."""
    return [[line for line in Path(run["log"]).read_text().splitlines() if re.match(pattern, line)]
            for run in result.report["runs"]]


@pytest.mark.parametrize(
    ("fixture", "children", "printed"),
    [("dataloader_workers.py", 2, r"step \d+ loss"),
     ("os_fork.py", 1, r"(child|parent) result"),
     ("multiprocessing_pools.py", None, r"(spawned|forked|stats sum|batch \d+):")],
)
def test_children_stay_out_of_the_parent_trace(run_fixture, fixture: str, children: int | None, printed: str) -> None:
    result = run_fixture(fixture, "eager,aot_eager")
    report = result.report
    assert result.exit_code == 0 and report["verdict"] == "match", result.stdout
    for trace in report["traces"]:
        footer = _assert_only_the_parent(trace)
        # A pool's tasks may all go to one of its two forked workers: at least one ran ops.
        assert footer["child_processes"] == children if children is not None else footer["child_processes"] >= 1
    assert any("child process" in note and "not recorded" in note for note in report["notes"])
    a, b = _printed(result, printed)
    assert a and a == b


@pytest.mark.slow
def test_dataloader_workers_match_under_inductor(run_fixture) -> None:
    result = run_fixture("dataloader_workers.py", "eager,inductor")
    assert result.exit_code == 0 and result.report["verdict"] == "match", result.stdout
    for trace in result.report["traces"]:
        assert _assert_only_the_parent(trace)["child_processes"] == 2
