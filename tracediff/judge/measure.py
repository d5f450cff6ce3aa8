"""How far one compiled output is from the truth, against how far eager's is: measured, then judged.

The child process measures (it has the tensors); the verdict judges (it has the user's tolerances). Both
read the same numbers, so a check record says why it passed or failed.

The criterion, for a floating output compared over the elements finite in all three results:

    wrong  iff  rms(c - e) > atol + rtol * rms(r)               (beyond the dtype's tolerance from eager)
           and  rms(c - r) > M * rms(e - r) + F * u * rms(r)    (and further from float64 than eager is)

c is the compiled output, e eager's on the same inputs, r the float64 reference's; u is the dtype's unit
roundoff (float32 2**-24, bfloat16 2**-8, float16 2**-11); M is 2, or 3 for 16-bit floats (as
`torch._dynamo.utils.same` allows); F is 4 (a few roundings the compiled code may add where eager was exact
by luck). The same test on the largest element-wise error (max instead of rms, with 4x the allowance) catches
a few wrong elements in a large tensor, which an rms hides.

A gradient is judged at its dtype's tolerance on the CPU, wherever it was computed (`tolerance_device`), and its
atol is at most 1e-4 * rms(r), but at least 10 * rms(e - r) and atol / 100: Adam reads a gradient at its own size
(GRADIENT_ATOL_SHARE), so a gradient 0.1% off moves every weight it reaches 0.1% otherwise.

A compiled output closer to float64 than eager's is right, unless it changes the result grossly: beyond the
tolerance and by more than 5% of the output's size (the larger rms of c and e), with its error from float64 at
most half eager's. That is the compiled code computing in more precision than the program's dtype says (bf16
math kept in float32, a bf16 constant kept exact) where the program's result hangs on it (a threshold, a
cancellation): judged a changed result, `kind` "precision", since the program prints other numbers. A compiled output with NaN/Inf where eager's and
float64's are finite is wrong; integer and bool outputs must equal eager's exactly; a dtype or shape that
differs from eager's is wrong whatever the values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from tracediff.config import DEFAULT_TOLERANCES, Tolerance, looser

# The multiple of eager's own error a compiled output may show (torch._dynamo.utils.same: 2, 3 for 16-bit).
ERROR_MULTIPLE = 2.0
ERROR_MULTIPLE_16BIT = 3.0
# Roundings (of the output's scale) a compiled output may add where eager's error is zero by luck.
ROUNDINGS_ALLOWED = 4.0
# The element-wise (max) test allows this many times the rms test's allowance.
MAX_ALLOWANCE = 4.0
# A change of more than this share of an output's size, where the compiled result is the more precise one,
# is a changed result all the same (see the module's docstring).
GROSS_CHANGE = 0.05
# A gradient's absolute tolerance is at most this share of its own size: Adam divides a gradient by its own running
# rms, so a small gradient counts in full (a bias gradient of rms 5e-5, 1% wrong, sat below float32's atol of 1e-6
# while it moved BART's weights beyond the tolerance; an up projection's weight gradient 0.13% off passed a share of
# 1e-3 on CUDA). Never below ten times eager's own error from float64, nor a hundredth of the atol: a gradient that
# is zero in exact math (a convolution's bias before a batch norm) is rounding noise the size of that error, and
# compiled code rounds otherwise.
GRADIENT_ATOL_SHARE = 1e-4
GRADIENT_NOISE_MULTIPLE = 10.0
GRADIENT_ATOL_FLOOR = 1e-2

_UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8,
                  torch.float16: 2.0 ** -11, torch.complex64: 2.0 ** -24, torch.complex128: 2.0 ** -53}


@dataclass(frozen=True)
class Measurement:
    """One output of one compiled call, measured. `problem` is set for what needs no tolerance to be wrong
    (dtype, shape, NaN where the references are finite, integers that differ)."""

    name: str  # "out0", "in3 (mutated)", "grad of in1"
    dtype: str  # the compiled output's
    shape: list[int]
    eager_dtype: str | None = None
    device: str = "cpu"
    problem: str | None = None
    dist: float = 0.0  # rms(c - e)
    err_c: float = 0.0  # rms(c - r)
    err_e: float = 0.0  # rms(e - r)
    scale: float = 0.0  # rms(r)
    size: float = 0.0  # max(rms(c), rms(e))
    dist_max: float = 0.0
    err_c_max: float = 0.0
    err_e_max: float = 0.0
    scale_max: float = 0.0
    nonfinite: int = 0  # elements non-finite in c where e and r are finite
    # The narrower floating dtype the call computed this wider output from (its autocast dtype: a float32 loss
    # of bfloat16 logits): it carries that dtype's rounding, and its distance from eager's is judged at that
    # dtype's tolerance (`carrying`, `carried_tolerance`).
    carried: str | None = None

    def as_record(self) -> dict[str, Any]:
        return {k: (round(v, 9) if isinstance(v, float) else v) for k, v in asdict(self).items()
                if v not in (None, 0, 0.0) or k in ("name", "dtype", "shape")}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Measurement:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in record.items() if k in known})


@dataclass(frozen=True)
class Judgement:
    wrong: bool
    why: str  # one line, with the numbers it was judged by
    kind: str | None = None  # "wrong" (further from float64 than eager), "precision" (grossly changed, closer)


def _rms(x: torch.Tensor) -> float:
    return float(x.pow(2).mean().sqrt()) if x.numel() else 0.0


def _max(x: torch.Tensor) -> float:
    return float(x.abs().max()) if x.numel() else 0.0


def measure(name: str, compiled: Any, eager: Any, reference: Any) -> Measurement | None:
    """Measure one output (None where it is no tensor and equals eager's: a symbolic size, None)."""
    if not isinstance(compiled, torch.Tensor) or not isinstance(eager, torch.Tensor):
        if isinstance(compiled, torch.Tensor) != isinstance(eager, torch.Tensor):
            return Measurement(name, _dtype_of(compiled), [], _dtype_of(eager),
                               problem=f"compiled gives {type(compiled).__name__}, eager {type(eager).__name__}")
        if compiled != eager and not (isinstance(compiled, float) and math.isnan(compiled) and math.isnan(eager)):
            return Measurement(name, type(compiled).__name__, [], problem=f"compiled gives {compiled!r}, eager {eager!r}")
        return None
    shape = list(compiled.shape)
    dtype = str(compiled.dtype).removeprefix("torch.")
    eager_dtype = str(eager.dtype).removeprefix("torch.")
    device = str(compiled.device)
    if compiled.dtype != eager.dtype:
        return Measurement(name, dtype, shape, eager_dtype, device, problem=f"dtype {dtype} where eager gives {eager_dtype}")
    if compiled.shape != eager.shape:
        return Measurement(name, dtype, shape, eager_dtype, device,
                           problem=f"shape {shape} where eager gives {list(eager.shape)}")
    if compiled.is_sparse or compiled.is_nested or eager.is_sparse or eager.is_nested:
        return None  # not read: a layout this comparison does not handle
    with torch.no_grad():
        c, e = compiled.detach(), eager.detach()
        if not (c.is_floating_point() or c.is_complex()):
            differ = int((c != e).sum()) if c.numel() else 0
            return Measurement(name, dtype, shape, eager_dtype, device,
                               problem=f"{differ} of {c.numel()} elements differ from eager's" if differ else None)
        r = reference.detach() if isinstance(reference, torch.Tensor) and reference.shape == c.shape else e
        if not (r.is_floating_point() or r.is_complex()):
            r = e  # a reference that is no float (an error of the reference's): judge against eager alone
        wide = torch.complex128 if c.is_complex() else torch.float64
        c, e, r = (t.to(device=c.device, dtype=wide) for t in (c, e, r))
        finite_c, finite_e, finite_r = c.isfinite(), e.isfinite(), r.isfinite()
        nonfinite = int((~finite_c & finite_e & finite_r).sum())
        both = finite_c & finite_e & finite_r
        c, e, r = c[both], e[both], r[both]
        dce, dcr, der = (c - e).abs(), (c - r).abs(), (e - r).abs()
        absr = r.abs()
        return Measurement(name, dtype, shape, eager_dtype, device,
                           problem=(f"{nonfinite} NaN/Inf element(s) where eager and float64 are finite"
                                    if nonfinite else None),
                           dist=_rms(dce), err_c=_rms(dcr), err_e=_rms(der), scale=_rms(absr),
                           size=max(_rms(c.abs()), _rms(e.abs())),
                           dist_max=_max(dce), err_c_max=_max(dcr), err_e_max=_max(der), scale_max=_max(absr),
                           nonfinite=nonfinite)


def _dtype_of(value: Any) -> str:
    return str(value.dtype).removeprefix("torch.") if isinstance(value, torch.Tensor) else type(value).__name__


def default_tolerance(dtype: str, device: str = "cpu") -> Tolerance:
    device_type = device.split(":", 1)[0]
    return DEFAULT_TOLERANCES.get(f"{dtype}@{device_type}") or DEFAULT_TOLERANCES.get(dtype) \
        or DEFAULT_TOLERANCES["float32"]


def is_gradient(m: Measurement) -> bool:
    return m.name.startswith("grad of")


def tolerance_device(m: Measurement) -> str:
    """The device whose tolerance judges `m`: its own, but the CPU's for a gradient. A device's looser entry
    (`float32@cuda`) is for values whose reductions cuDNN and Triton order otherwise than each other; a gradient
    keeps the CPU's, since an optimizer carries its error into every weight it moves (a 0.13% error passed
    CUDA's rtol of 1e-3), and a reordered reduction is told from a fault by the second condition: no further from
    float64 than eager."""
    return "cpu" if is_gradient(m) else m.device


def judge(m: Measurement, tolerance: Tolerance) -> Judgement:
    """Whether the compiled output is locally wrong, with the numbers that decided it."""
    if m.problem:
        return Judgement(True, m.problem, "wrong")
    dtype = getattr(torch, m.dtype, None)
    u = _UNIT_ROUNDOFF.get(dtype, 2.0 ** -24) if isinstance(dtype, torch.dtype) else 0.0
    if not isinstance(dtype, torch.dtype) or not (dtype.is_floating_point or dtype.is_complex):
        return Judgement(False, "equal to eager's")
    multiple = ERROR_MULTIPLE_16BIT if dtype in (torch.bfloat16, torch.float16) else ERROR_MULTIPLE
    beyond_tol = m.dist > _atol(m, tolerance, m.scale, m.err_e) + tolerance.rtol * m.scale
    allowed = multiple * m.err_e + ROUNDINGS_ALLOWED * u * m.scale
    rms_wrong = beyond_tol and m.err_c > allowed
    beyond_tol_max = m.dist_max > MAX_ALLOWANCE * (_atol(m, tolerance, m.scale_max, m.err_e_max)
                                                   + tolerance.rtol * m.scale_max)
    allowed_max = MAX_ALLOWANCE * (multiple * m.err_e_max + ROUNDINGS_ALLOWED * u * m.scale_max)
    max_wrong = beyond_tol_max and m.err_c_max > allowed_max
    if rms_wrong:
        return Judgement(True, kind="wrong", why=f"rms error from float64 {m.err_c:.3g} where eager's is {m.err_e:.3g} "
                               f"(allowed {allowed:.3g}; {m.dist:.3g} from eager, scale {m.scale:.3g}, {tolerance})")
    if max_wrong:
        return Judgement(True, kind="wrong", why=f"largest error from float64 {m.err_c_max:.3g} where eager's is {m.err_e_max:.3g} "
                               f"(allowed {allowed_max:.3g}; {m.dist_max:.3g} from eager, largest value "
                               f"{m.scale_max:.3g}, {tolerance})")
    gross = m.dist > tolerance.atol + max(tolerance.rtol, GROSS_CHANGE) * m.size
    if gross and 2 * m.err_c <= m.err_e:
        return Judgement(True, kind="precision", why=(
            f"changed by {m.dist:.3g} (rms) of a value of size {m.size:.3g}, closer to float64 than eager "
            f"({m.err_c:.3g} against {m.err_e:.3g}): the compiled code keeps more precision than the program's "
            f"dtype, and the result changes with it ({tolerance})"))
    if not beyond_tol and not beyond_tol_max:
        return Judgement(False, f"{m.dist:.3g} from eager (rms), within {tolerance}")
    return Judgement(False, f"{m.dist:.3g} from eager, but no further from float64 than eager "
                            f"({m.err_c:.3g} against {m.err_e:.3g})")


def _atol(m: Measurement, tolerance: Tolerance, scale: float, eager_error: float) -> float:
    """The absolute tolerance for `m`, whose size (rms or largest value) is `scale` and eager's error from float64
    `eager_error` (rms or largest): a gradient's is GRADIENT_ATOL_SHARE of its size, within [GRADIENT_ATOL_FLOOR of
    the atol and GRADIENT_NOISE_MULTIPLE times eager's error, the atol]."""
    if not is_gradient(m):
        return tolerance.atol
    floor = max(GRADIENT_ATOL_FLOOR * tolerance.atol, GRADIENT_NOISE_MULTIPLE * eager_error)
    return min(tolerance.atol, max(GRADIENT_ATOL_SHARE * scale, floor))


def any_wrong(measured: Iterable[Measurement | None], carried: str | None = None) -> bool:
    """Whether any of these outputs is wrong at its dtype's default tolerance (`carried`: see `carrying`): the
    recording child's own test, which picks the wrong calls to narrow (the verdict judges again with the user's
    tolerances)."""
    return any(judge(m, carried_tolerance(m, default_tolerance(m.dtype), lambda dtype, _: default_tolerance(dtype))).wrong
               for m in carrying((m for m in measured if m is not None), carried))


def carried_tolerance(m: Measurement, own: Tolerance, tolerance_of: Callable[[str, str], Tolerance]) -> Tolerance:
    """`own` (the output's dtype's tolerance), loosened to its carried dtype's (`tolerance_of(dtype, device)`)."""
    return looser(own, tolerance_of(m.carried, m.device)) if m.carried else own


def carrying(measured: Iterable[Measurement], carried: str | None) -> list[Measurement]:
    """`measured`, each floating output wider than `carried` (the 16-bit dtype the call computed in under autocast)
    marked as carrying its precision: its value was computed from `carried`'s roundings (autocast's matmuls), which
    eager and the compiled code make at other places (inductor keeps float32 inside a fused kernel), so its
    distance from eager's is judged at `carried`'s tolerance, as the traces judge a value widened from bfloat16
    (diff/precision.py). Its error from float64 is still held to `M` times eager's and its own dtype's roundings:
    a fault shows there."""
    if carried is None:
        return list(measured)
    narrow = _unit_roundoff(carried) or 0.0
    return [replace(m, carried=carried) if not m.problem and narrow > (_unit_roundoff(m.dtype) or narrow) else m
            for m in measured]


def _unit_roundoff(dtype_name: str) -> float | None:
    """A floating dtype's unit roundoff, by its name ("float32"); None for other dtypes."""
    dtype = getattr(torch, dtype_name, None) if dtype_name else None
    return _UNIT_ROUNDOFF.get(dtype) if isinstance(dtype, torch.dtype) else None
