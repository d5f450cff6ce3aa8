"""Is a planted fault observable? The program's results with and without it, compared exactly."""

from __future__ import annotations

import math
from pathlib import Path

import models
import torch

from tracediff.config import Config, Tolerance


def float32_tolerance(config: Config, device: str) -> Tolerance:
    return config.tolerance_for("float32", "", None, "cuda" if device.startswith("cuda") else "cpu")


def output_difference(a_file: Path, b_file: Path, tolerance: Tolerance, leave_out_last: int = 0
                      ) -> dict[str, float] | None:
    """How far the program's results differ, in multiples of what the float32 tolerance allows, computed
    exactly on the saved tensors (not from tracediff's fingerprints):

      statistics  the tolerance as tracediff defines it (diff/compare.py): the sum, l1, l2 and max of
                  each result and the L2 distance ||a - b|| against rtol times their scale (as
                  torch._dynamo.utils.same judges by RMSE); over 1: the fault is observable
      elements    element by element against the tensor's magnitude (max |a - b| against
                  rtol * max |a| + atol): over 1 while `statistics` is not means a few elements moved
                  by less than the tolerance lets the whole tensor move, which no fingerprint can see

    `leave_out_last`: that many of the last results are not compared. None when the faulty run saved no results."""
    if not b_file.exists():
        return None
    rtol, atol = tolerance.rtol, tolerance.atol
    worst = {"statistics": 0.0, "elements": 0.0}
    pairs = list(zip(torch.load(a_file, map_location="cpu"), torch.load(b_file, map_location="cpu")))
    for a, b in pairs[: len(pairs) - leave_out_last]:
        if a.shape != b.shape or not torch.equal(a.isfinite(), b.isfinite()):
            return {"statistics": math.inf, "elements": math.inf}
        finite = a.isfinite()
        a, b = a[finite].double(), b[finite].double()
        if not a.numel():
            continue
        n = a.numel()
        l1, l2 = max(a.abs().sum(), b.abs().sum()), max(a.norm(), b.norm())
        top = max(a.abs().max(), b.abs().max())
        statistics = ((a.sum() - b.sum()).abs() / (rtol * l1 + atol * n),
                      (a.abs().sum() - b.abs().sum()).abs() / (rtol * l1 + atol * n),
                      (a.norm() - b.norm()).abs() / (rtol * l2 + atol * math.sqrt(n)),
                      (a.abs().max() - b.abs().max()).abs() / (rtol * top + atol),
                      (a - b).norm() / (rtol * l2 + atol * math.sqrt(n)))
        worst["statistics"] = max(worst["statistics"], *(float(x) for x in statistics))
        worst["elements"] = max(worst["elements"], float((a - b).abs().max() / (rtol * a.abs().max() + atol)))
    return worst


def clean_results(fault_dir: Path) -> Path:
    """The results the clean compiled run (no fault) of a fault's model and backend saved."""
    return fault_dir.parent / "clean" / "a.pt"


def observability(reference: Path, faulty: Path, clean: Path, tolerance: Tolerance, model: str = "") -> dict:
    """Is the fault observable? Its run's results must differ from eager's beyond the tolerance where the
    compiled code computed them, and the fault's own effect (its results against the clean compiled run's)
    must exceed both the tolerance and what the backend alone changes (the clean run's results against
    eager's, its noise). A compiled training step can move the results beyond the tolerance with no fault
    at all (AdamW amplifying rounding of near-zero gradients), which tracediff rightly calls noise: a fault
    whose effect is no larger cannot be told from it by any comparison of these runs, and is counted apart
    (`in_noise`). `effect` and `noise` are None where the clean run saved no results: then eager's
    difference decides.

    The last results of a training `model` (its weights, models.updated_by_optimizer) come from an eager
    optimizer step fed by the compiled gradients. Where those gradients agree within the tolerance and
    only the weights differ beyond it, the optimizer amplified differences below the tolerance (AdamW's
    first step is about lr * sign(grad): a gradient near zero that moves by an ulp flips a weight's
    update), which tracediff reports as amplified, not as a divergence: counted apart (`amplified`),
    whatever the verdict.

    Returns {"difference", "effect", "noise", "observable", "in_noise", "amplified"}."""
    difference = output_difference(reference, faulty, tolerance)
    updated_by_optimizer = models.updated_by_optimizer(model, len(torch.load(reference, map_location="cpu")))
    beyond_anywhere = difference is not None and difference["statistics"] > 1
    compiled = (output_difference(reference, faulty, tolerance, updated_by_optimizer) if updated_by_optimizer
                else difference)
    beyond = compiled is not None and compiled["statistics"] > 1
    effect = output_difference(clean, faulty, tolerance, updated_by_optimizer) if clean.is_file() else None
    noise = output_difference(reference, clean, tolerance, updated_by_optimizer) if clean.is_file() else None
    floor = max(1.0, noise["statistics"]) if noise is not None else 1.0
    observable = beyond and (effect is None or effect["statistics"] > floor)
    return {"difference": difference, "effect": effect, "noise": noise, "observable": observable,
            "in_noise": beyond and not observable, "amplified": beyond_anywhere and not beyond}
