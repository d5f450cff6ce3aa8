"""bench/localize/observe.py: when a planted fault counts as observable."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import torch

from tracediff.config import Tolerance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "localize"))
from observe import observability, output_difference  # noqa: E402
from run import CleanRuns, summarize  # noqa: E402

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
    assert row.split("|")[9].strip() == "2 (1, 0, 0)", row


def _observability(tmp_path: Path, reference: torch.Tensor, clean: torch.Tensor | None, faulty: torch.Tensor) -> dict:
    torch.save([reference], tmp_path / "ref.pt")
    torch.save([faulty], tmp_path / "b.pt")
    if clean is not None:
        torch.save([clean], tmp_path / "clean.pt")
    return observability(tmp_path / "ref.pt", tmp_path / "b.pt", tmp_path / "clean.pt", TOLERANCE)


def test_a_fault_that_changes_nothing_is_not_observable_where_the_backend_alone_moves_the_results(
        tmp_path: Path) -> None:
    """CPU GPT-2 training step under inductor (seed 4, g3n80): the faulty run's results were bitwise those of
    the clean compiled run, both 1.1 times the tolerance from eager's (AdamW amplifying rounding), and the
    benchmark counted tracediff's `match` as a false match."""
    reference = torch.randn(8, 10, generator=torch.Generator().manual_seed(0))
    compiled = reference * 1.0015
    judged = _observability(tmp_path, reference, compiled, compiled.clone())
    assert judged["difference"]["statistics"] > 1 and judged["effect"]["statistics"] == 0
    assert judged["observable"] is False


def test_a_fault_whose_effect_is_no_larger_than_the_backend_s_own_noise_is_counted_apart(tmp_path: Path) -> None:
    """CPU GPT-2 training step under inductor (seed 4, g3n80): the fault moved the results 1.10 times the
    tolerance from the clean compiled run's, which itself sat 1.11 times from eager's: tracediff's `match`
    (amplified noise, as on the clean run) was counted a false match."""
    reference = torch.randn(8, 10, generator=torch.Generator().manual_seed(0))
    compiled = reference * 1.0015
    faulty = compiled.clone()
    faulty[0] *= 1.004
    judged = _observability(tmp_path, reference, compiled, faulty)
    assert 1 < judged["effect"]["statistics"] < judged["noise"]["statistics"]
    assert judged["observable"] is False and judged["in_noise"] is True
    assert judged["difference"]["statistics"] > 1


def _training_step(tmp_path: Path, name: str, loss: float, gradient: torch.Tensor, weight: torch.Tensor) -> Path:
    torch.save([torch.tensor(loss), gradient, weight], tmp_path / name)
    return tmp_path / name


def test_weights_beyond_the_tolerance_from_gradients_within_it_are_amplified_not_observable(tmp_path: Path) -> None:
    """CPU GPT-2 training step, aot_eager, seed 9, g3n12 (and inductor, seed 10, g3n32): a backward fault moved
    the gradients by a quarter of the tolerance; AdamW's step turned that into weights 1.37 times the
    tolerance from eager's, which tracediff reports as amplified differences below the tolerance (`match`,
    as on a clean run), and the benchmark counted a false match."""
    g = torch.Generator().manual_seed(0)
    gradient, weight = torch.randn(64, generator=g), torch.randn(64, generator=g)
    reference = _training_step(tmp_path, "ref.pt", 1.0, gradient, weight)
    clean = _training_step(tmp_path, "clean.pt", 1.0, gradient, weight)
    faulty = _training_step(tmp_path, "b.pt", 1.0, gradient * (1 + 2e-5), weight * 1.01)
    judged = observability(reference, faulty, clean, TOLERANCE, "train_gpt2")
    assert judged["difference"]["statistics"] > 1
    assert judged["observable"] is False and judged["amplified"] is True and judged["in_noise"] is False
    faulty = _training_step(tmp_path, "b.pt", 1.0, gradient * 1.01, weight * 1.01)  # the gradients moved too
    judged = observability(reference, faulty, clean, TOLERANCE, "train_gpt2")
    assert judged["observable"] is True and judged["amplified"] is False
    # A forward model's results are all computed by the compiled code.
    faulty = _training_step(tmp_path, "b.pt", 1.0, gradient * (1 + 2e-5), weight * 1.01)
    assert observability(reference, faulty, clean, TOLERANCE, "gpt2")["observable"] is True


def test_a_fault_beyond_the_tolerance_from_the_clean_run_too_is_observable(tmp_path: Path) -> None:
    reference = torch.randn(8, 10, generator=torch.Generator().manual_seed(0))
    judged = _observability(tmp_path, reference, reference.clone(), reference * 1.01)
    assert judged["observable"] is True and judged["effect"]["statistics"] > 1


def test_without_the_clean_run_s_results_the_difference_from_eager_decides(tmp_path: Path) -> None:
    reference = torch.randn(8, 10, generator=torch.Generator().manual_seed(0))
    judged = _observability(tmp_path, reference, None, reference * 1.01)
    assert judged["observable"] is True and judged["effect"] is None


def test_a_fault_waits_for_the_clean_run_of_its_model_and_backend_only(tmp_path: Path) -> None:
    jobs = [{"dir": str(tmp_path / "mlp" / "inductor" / "clean"), "plant": None},
            {"dir": str(tmp_path / "mlp" / "inductor" / "g0n1"), "plant": "0:1:1.01"},
            {"dir": str(tmp_path / "cnn" / "inductor" / "g0n1"), "plant": "0:1:1.01"}]
    runs = CleanRuns(jobs)
    waited = threading.Thread(target=runs.wait_for, args=(jobs[1],))
    waited.start()
    waited.join(0.2)
    assert waited.is_alive()  # its clean run has not finished
    runs.wait_for(jobs[2])  # no clean run in the job list: nothing to wait for
    runs.finished(jobs[0])
    waited.join(5)
    assert not waited.is_alive()
