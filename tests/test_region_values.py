"""Values a compiled run changes where no paired op shows it, end to end.

- The graph's last op perturbed (a pass scaling the value the region returns):
  the op only B runs before the region's exit is named at its source line.
"""

from __future__ import annotations

import pytest

from tests.conftest import marker_line

LAST_OP = "last_op_fault.py"


def _assert_last_op_named(report: dict, b_op: str) -> None:
    first = report["first_divergence"]
    assert report["verdict"] == "diverged"
    assert first["source"] == f"{LAST_OP}:{marker_line(LAST_OP, 'divergent line')}"
    assert first["op"] == "aten::addmm" and first["module"] == "Net.fc"
    assert first["observed"]["op"].startswith("region exit Net.forward")
    assert first["b"]["source"] == first["source"]
    assert b_op in first["note"]


def test_a_pass_on_the_last_op_of_an_aot_graph_is_named(run_fixture) -> None:
    result = run_fixture(LAST_OP, "eager,fault_last_op:perturb_last_backend")
    assert result.exit_code == 1, result.stderr
    _assert_last_op_named(result.report, "aten::mul.Tensor")
    assert result.report["first_divergence"]["b"]["op"] == "aten::mul.Tensor"


@pytest.mark.slow
def test_a_post_grad_pass_on_the_last_op_is_named_under_inductor(run_fixture) -> None:
    result = run_fixture(LAST_OP, "eager,inductor")
    assert result.exit_code == 1, result.stderr
    _assert_last_op_named(result.report, "aten::mul.Tensor")
