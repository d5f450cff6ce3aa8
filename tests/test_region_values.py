"""Values a compiled run changes where no paired op shows it, end to end.

- The graph's last op perturbed (a pass scaling the value the region returns):
  the op only B runs before the region's exit is named at its source line.
- Values written into a view (`v = h.view(-1); v[idx] = vals; return h`)
  perturbed: the write is followed to the base the region returns.
"""

from __future__ import annotations

import pytest

from tests.conftest import TRACES_ONLY, marker_line

LAST_OP = "last_op_fault.py"
VIEW_WRITE = "view_index_put.py"


def _assert_last_op_named(report: dict, b_op: str) -> None:
    first = report["first_divergence"]
    assert report["verdict"] == "diverged"
    assert first["source"] == f"{LAST_OP}:{marker_line(LAST_OP, 'divergent line')}"
    assert first["op"] == "aten::addmm" and first["module"] == "Net.fc"
    assert first["observed"]["op"].startswith("region exit Net.forward")
    assert first["b"]["source"] == first["source"]
    assert b_op in first["note"]


def test_a_pass_on_the_last_op_of_an_aot_graph_is_named(run_fixture) -> None:
    result = run_fixture(LAST_OP, "eager,fault_last_op:perturb_last_backend", TRACES_ONLY)
    assert result.exit_code == 1, result.stderr
    _assert_last_op_named(result.report, "aten::mul.Tensor")
    assert result.report["first_divergence"]["b"]["op"] == "aten::mul.Tensor"


def _assert_view_write_named(report: dict) -> None:
    first = report["first_divergence"]
    assert report["verdict"] == "diverged"
    assert first["source"] == f"{VIEW_WRITE}:{marker_line(VIEW_WRITE, 'divergent line')}"
    assert first["op"] == "aten::index_put_"
    assert first["observed"]["op"].startswith("region exit Net.forward")


def test_a_faulty_write_through_a_view_is_named_under_an_aot_backend(run_fixture) -> None:
    """aot_eager runs index_put_ as its own op: the values it writes agree when A's mul makes them,
    and B's extra mul changes them before index_put_ reads them."""
    result = run_fixture(VIEW_WRITE, "eager,fault_index_put:perturb_index_put_backend", TRACES_ONLY)
    assert result.exit_code == 1, result.stderr
    first = result.report["first_divergence"]
    assert first["source"] == f"{VIEW_WRITE}:{marker_line(VIEW_WRITE, 'divergent line')}"
    assert first["observed"]["op"] == "aten::index_put_"
    assert "B runs aten::mul.Tensor" in first["note"]


@pytest.mark.slow
def test_a_faulty_write_through_a_view_fused_by_inductor_is_named(run_fixture) -> None:
    result = run_fixture(VIEW_WRITE, "eager,inductor", "--no-narrow", TRACES_ONLY)
    assert result.exit_code == 1, result.stderr
    _assert_view_write_named(result.report)
    assert "aten::index_put_" in [c["op"] for c in result.report["first_divergence"]["candidates"]]
