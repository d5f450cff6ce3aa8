"""bench/localize/observe.py: when a planted fault counts as observable."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from tracediff.config import Tolerance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "localize"))
from observe import output_difference  # noqa: E402
from run import summarize  # noqa: E402

TOLERANCE = Tolerance(1e-3, 1e-5)


def _difference(tmp_path: Path, a: torch.Tensor, b: torch.Tensor) -> dict[str, float] | None:
    torch.save([a], tmp_path / "a.pt")
    torch.save([b], tmp_path / "b.pt")
    return output_difference(tmp_path / "a.pt", tmp_path / "b.pt", TOLERANCE)


def test_a_change_of_the_whole_result_beyond_the_tolerance_is_observable(tmp_path: Path) -> None:
    a = torch.randn(8, 10, generator=torch.Generator().manual_seed(0))
    difference = _difference(tmp_path, a, a * 1.01)
    assert difference is not None and difference["statistics"] > 1 and difference["elements"] > 1


def test_two_elements_moved_within_what_the_whole_may_move_are_elements_only(tmp_path: Path) -> None:
    a = torch.randn(8, 10, generator=torch.Generator().manual_seed(0)) - 2.0
    b = a.clone()
    b.view(-1)[:2] += 1.3e-3 * a.abs().max()  # each beyond rtol * max|a|, the L2 distance well within
    difference = _difference(tmp_path, a, b)
    assert difference is not None and difference["statistics"] < 1 < difference["elements"]


def test_a_nan_where_there_was_none_is_observable(tmp_path: Path) -> None:
    a = torch.ones(4)
    difference = _difference(tmp_path, a, torch.tensor([1.0, float("nan"), 1.0, 1.0]))
    assert difference is not None and difference["statistics"] == float("inf")


def test_no_saved_results_is_not_judged(tmp_path: Path) -> None:
    torch.save([torch.ones(2)], tmp_path / "a.pt")
    assert output_difference(tmp_path / "a.pt", tmp_path / "missing.pt", TOLERANCE) is None


def test_the_table_counts_elements_only_faults_apart() -> None:
    results = [{"model": "mlp", "backend": "inductor", "plant": "0:1:1.01", "outcome": "unobservable",
                "difference": {"statistics": 0.7, "elements": 1.3}},
               {"model": "mlp", "backend": "inductor", "plant": "0:2:1.01", "outcome": "unobservable",
                "difference": {"statistics": 0.1, "elements": 0.2}},
               {"model": "mlp", "backend": "inductor", "plant": "0:3:1.01", "outcome": "exact",
                "difference": {"statistics": 5.0, "elements": 5.0}}]
    row = summarize(results).splitlines()[2]
    assert row.split("|")[9].strip() == "2 (1)", row
