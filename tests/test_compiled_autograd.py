"""Compiled autograd (`torch._dynamo.config.compiled_autograd`): dynamo captures the backward as a graph of its own,
custom autograd.Functions' backwards included. The judge's tap on a call's inputs must stay out of it, and the
captured backward, which accumulates gradients into `.grad` and returns nothing to compare, is not judged."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import Result


def test_a_step_compiled_with_compiled_autograd_matches_and_says_its_backward_is_not_judged(
        run_fixture: Callable[..., Result]) -> None:
    # Before: the tap's backward was traced into the captured backward, and that graph judged: `diverged`.
    report = run_fixture("compiled_autograd_step.py", "eager,aot_eager").report
    assert report["verdict"] == "match" and report["exit_code"] == 0, report.get("first_divergence")
    judged = report["same_inputs"]
    assert judged["calls"] == 3 and judged["wrong_calls"] == 0  # each step's forward, judged
    assert judged["graphs"] == 1  # no graph of tracediff's own judging code
    assert "compiled autograd" in judged["unjudged_reason"]
