"""The child's side of `tracediff fix`: make the changes in the running script.

Precision settings are made before the script runs and again when it calls
`torch.compile` (a script often sets its own); everything else when it calls
`torch.compile`, after its imports have registered their decompositions,
lowerings and passes and before anything is compiled (compilation waits for
the first call). Each change says on stdout (the run's log) whether it was
made.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

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
from tracediff.record.customizations import without_scripts_passes


def _overload(op: str) -> Any:
    namespace, name, overload = parts(op)
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def _full_precision() -> None:
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def _submodule(model: Any, target: str) -> torch.nn.Module | None:
    """The module at `target` (`Net.block.act`: the root's class name, then the path inside it) where
    `model` is that root; None where it is not (another compiled function, or no such module)."""
    if not isinstance(model, torch.nn.Module):
        model = getattr(model, "__self__", None)  # `module.compile()` compiles its bound _call_impl
        if not isinstance(model, torch.nn.Module):
            return None
    root, _, path = target.partition(".")
    if type(model).__name__ != root or not path:
        return None
    try:
        return model.get_submodule(path)
    except AttributeError:
        return None


def _widened(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16):
        return value.float()
    return value


def in_float32(forward: Any) -> Any:
    """`forward` with autocast off and its half-precision tensor arguments widened to float32: a module
    kept in float32 inside an autocast region (the lines `FLOAT32_MODULE`'s patch prints do the same)."""

    @functools.wraps(forward)
    def forward_in_float32(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = torch.utils._pytree.tree_map(_widened, (args, kwargs))
        with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
            return forward(*args, **kwargs)

    return forward_in_float32


class FixApplier:
    """Makes `changes` in this process: `before_script()` once, `before_compile(model)` at each
    `torch.compile` call (CompileRedirect calls it)."""

    def __init__(self, changes: list[Change]) -> None:
        self.changes = changes
        self._made: set[Change] = set()

    def before_script(self) -> None:
        if any(c.kind == MATMUL_PRECISION for c in self.changes):
            _full_precision()

    def before_compile(self, model: Any) -> bool:
        """Make the changes; False where one is to compile nothing (torch.compile then returns `model` itself)."""
        import torch._inductor.config as config
        import torch._inductor.decomposition as decomposition
        import torch._inductor.lowering as lowering

        for change in self.changes:
            kind = change.kind
            if kind == DROP_DECOMPOSITION:
                decomposition.decompositions.pop(_overload(change.target), None)
            elif kind == DROP_LOWERING:
                lowering.lowerings.pop(_overload(change.target), None)
            elif kind == DROP_PASS:  # the recorder's own pass stays (record/original_aten.py)
                setattr(config, change.target, without_scripts_passes(getattr(config, change.target, None)))
            elif kind == INDUCTOR_CONFIG:
                setattr(config, change.target, change.value)
            elif kind == MATMUL_PRECISION:
                _full_precision()
            elif kind == FALLBACK:
                op = _overload(change.target)
                decomposition.decompositions.pop(op, None)
                lowering.make_fallback(op, warn=False, override_decomp=True)
            elif kind in (DISABLE_MODULE, FLOAT32_MODULE):
                module = _submodule(model, change.target)
                if module is None:
                    continue
                if kind == DISABLE_MODULE:
                    module.forward = torch.compiler.disable(module.forward)
                else:
                    module.forward = in_float32(module.forward)
            self._say(change)
        return not any(change.kind == NO_COMPILE for change in self.changes)

    def _say(self, change: Change) -> None:
        if change not in self._made:
            self._made.add(change)
            print(f"tracediff: fix: made the change: {change.describe()}", flush=True)

    def report_unmade(self) -> None:
        for change in self.changes:
            if change not in self._made and change.kind != MATMUL_PRECISION:
                print(f"tracediff: fix: could not make the change: {change.describe()}", flush=True)
