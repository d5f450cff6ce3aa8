"""Precision or wrong result: what a difference that exists only in fused code is.

When a fused kernel's output differs from eager but the same ops compiled one
kernel per op agree with eager, the difference comes from fusing them. That
is either precision (fused code keeps intermediates in registers at a higher
precision, or reorders a reduction: a legitimate, different rounding) or a
wrong result (a fused kernel that computes something else, e.g. a wrong index
formula that exists only in the fused code).

The numbers tell them apart where a float64 evaluation of the same ops is at
hand (the reference re-run in float64, as `--calibrate` records it): a
precision difference leaves the fused result about as close to the float64
value as eager's, or closer; a wrong result is far from it where eager is
close. Between the two, or without a float64 value, it is `unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracediff.diff.noise import paired_tensors, relative_noise
from tracediff.trace.schema import Fingerprint, without_sketch

PRECISION = "precision"
WRONG_RESULT = "wrong_result"
UNKNOWN = "unknown"

# Within this factor of eager's own distance from float64: as close as eager.
_AS_CLOSE = 2.0
# Beyond this factor (and beyond the dtype's rounding): a result eager's rounding cannot explain.
_FAR = 10.0

# Unit roundoff of each floating dtype: a distance below it is rounding whatever the ratio.
_EPSILON = {"float64": 2.2e-16, "complex128": 2.2e-16, "float32": 1.2e-7, "complex64": 1.2e-7,
            "float16": 9.8e-4, "bfloat16": 7.8e-3}


@dataclass(frozen=True)
class FusionEffect:
    """Eager's and the fused kernel's distances from the float64 value, and what they say."""

    effect: str  # PRECISION | WRONG_RESULT | UNKNOWN
    eager_error: float | None  # relative distance of A's value from the float64 value
    fused_error: float | None  # the same for B's (fused) value
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"effect": self.effect, "eager_error": self.eager_error, "fused_error": self.fused_error,
                "reason": self.reason}


def judge(fp_eager: Fingerprint | None, fp_fused: Fingerprint | None, fp_float64: Fingerprint | None,
          dtype: str | None) -> FusionEffect:
    """Precision or wrong result, from the fingerprints of one tensor in the three runs."""
    if fp_float64 is None:
        return FusionEffect(UNKNOWN, None, None, "no float64 value of this tensor to compare with")
    # The fused value is a kernel's buffer: judged on the order-free statistics, as the verdict judges it.
    eager = relative_noise(fp_eager and without_sketch(fp_eager), fp_float64)
    fused = relative_noise(fp_fused and without_sketch(fp_fused), fp_float64)
    if eager is None or fused is None:
        return FusionEffect(UNKNOWN, eager, fused, "the fingerprints cannot be compared (NaN/Inf or other sizes)")
    scale = max(eager, _EPSILON.get(dtype or "", 0.0))
    if fused <= _AS_CLOSE * scale:
        how = "closer to float64 than eager's" if fused < eager / _AS_CLOSE else "about as close to float64 as eager's"
        return FusionEffect(PRECISION, eager, fused, f"the fused result is {how} "
                            f"(relative error {fused:.3g} vs eager's {eager:.3g})")
    if fused >= _FAR * scale:
        return FusionEffect(WRONG_RESULT, eager, fused, f"the fused result is far from float64 (relative error "
                            f"{fused:.3g}) where eager is close ({eager:.3g})")
    return FusionEffect(UNKNOWN, eager, fused, f"the fused result is somewhat further from float64 than eager's "
                        f"(relative error {fused:.3g} vs {eager:.3g}): too close to call")


def float64_value(reference: str | Path, float64_run: str | Path, index: int, side: str,
                  arg: str) -> Fingerprint | None:
    """The float64 run's fingerprint of the reference's tensor (record `index`, `side`, `arg`), if paired."""
    for (i, s, a), _t, partner in paired_tensors(reference, float64_run):
        if i > index:
            break
        if (i, s, a) == (index, side, arg):
            return partner.get("fp")
    return None


def judge_divergence(first: dict[str, Any], reference: str | Path, float64_run: str | Path) -> FusionEffect:
    """Judge the tensor a report's first divergence shows differing (at `observed`, else at the op)."""
    tensor = first.get("tensor")
    if not tensor:
        return FusionEffect(UNKNOWN, None, None, "the divergence names no tensor")
    index = (first.get("observed") or first)["index"]
    fp64 = float64_value(reference, float64_run, index, tensor["side"], tensor["arg"])
    return judge(tensor.get("fingerprint_a"), tensor.get("fingerprint_b"), fp64, tensor.get("dtype"))
