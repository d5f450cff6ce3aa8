"""Which changes `tracediff fix` tries for a divergence, most local first.

From the verdict: the op found (and the other candidates of its fused kernel),
its module, and what the compiled run's footer says the script changed in
inductor (record/customizations.py). Knobs are tried only where they can
matter: precision casts for half-precision values, TF32 for matmuls on CUDA.
"""

from __future__ import annotations

from typing import Any

from tracediff.fix.changes import (
    DISABLE_MODULE,
    DROP_DECOMPOSITION,
    DROP_LOWERING,
    DROP_PASS,
    FALLBACK,
    FLOAT32_MODULE,
    INDUCTOR_CONFIG,
    MATMUL_PRECISION,
    NO_COMPILE,
    Change,
)
from tracediff.op_names import parts
from tracediff.outcome import Divergence
from tracediff.record.backends import resolve_backend

# Ops a fallback is tried for, at most: the op found and the first other candidates.
MAX_FALLBACKS = 3
_HALF = ("bfloat16", "float16")
_MATMULS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution", "_scaled_dot_product")


def divergent_ops(first: Divergence) -> list[str]:
    """The aten ops the verdict names, the op found first (kernels and regions are not ops)."""
    named = [first.site.op, *(c.op for c in first.candidates)]
    ops: list[str] = []
    for op in named:
        if op and "::" in op and op not in ops:
            ops.append(op)
    return ops


def module_chain(module: str | None) -> list[str]:
    """`Net.block.act` -> [`Net.block.act`, `Net.block`]: the module and its parents, the root left out
    (its compile disabled is the whole function uncompiled, tried last)."""
    if not module or "." not in module:
        return []
    names = module.split(".")
    return [".".join(names[:k]) for k in range(len(names), 1, -1)]


def _half_precision(first: Divergence) -> bool:
    """The values that differ are half precision (the trace rules' tensor, or the judged call's output)."""
    tensor, judged = first.tensor, first.judged or {}
    return (tensor is not None and tensor.dtype in _HALF) or judged.get("dtype") in _HALF


def _rounding_suspected(first: Divergence) -> bool:
    """Half-precision values, or narrowing (or the same-input judge) found compiled code rounding otherwise."""
    effect = (first.narrowing or {}).get("fusion_effect")
    return _half_precision(first) or effect == "precision" or (first.judged or {}).get("kind") == "precision"


def plan(first: Divergence, backend: str, customizations: dict[str, list[str]], on_cuda: bool,
         settings: dict[str, Any]) -> list[Change]:
    """The changes to try for `first` (a divergence of eager against `backend`), most local first."""
    inductor = backend != "eager" and ":" not in backend and resolve_backend(backend).is_inductor
    ops = divergent_ops(first)
    changes: list[Change] = []
    for op in ops:
        if op in customizations.get("decompositions", ()):
            changes.append(Change(DROP_DECOMPOSITION, op))
        if op in customizations.get("lowerings", ()):
            changes.append(Change(DROP_LOWERING, op))
    changes += [Change(DROP_PASS, name) for name in customizations.get("passes", ())]
    if inductor:
        inductor_settings = settings.get("inductor") or {}
        if _rounding_suspected(first) and not inductor_settings.get("emulate_precision_casts"):
            changes.append(Change(INDUCTOR_CONFIG, "emulate_precision_casts", True))
        if on_cuda and any(parts(op)[1] in _MATMULS for op in ops):
            changes.append(Change(MATMUL_PRECISION))
    modules = module_chain(first.site.module)
    if modules and _half_precision(first):  # autocast's, most often
        changes.append(Change(FLOAT32_MODULE, modules[0]))
    if inductor:
        changes += [Change(FALLBACK, op) for op in ops[:MAX_FALLBACKS] if parts(op)[0] == "aten"]
    changes += [Change(DISABLE_MODULE, name) for name in modules]
    changes.append(Change(NO_COMPILE))
    return changes
