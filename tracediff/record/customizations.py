"""What a script changed in inductor itself: decompositions and lowerings it registered, passes it set.

Read at the end of a recording (the trace's footer), from the modules already
imported: a script that never imported inductor changed none of it, and this
does not import it either. `tracediff fix` turns each into a change to try
(drop the decomposition, the lowering or the pass).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from tracediff.op_names import op_name

# inductor's config settings that hold a script's own graph passes.
PASS_SETTINGS = ("pre_grad_custom_pass", "joint_custom_pre_pass", "joint_custom_post_pass",
                 "post_grad_custom_pre_pass", "post_grad_custom_post_pass")
# Wrappers followed at most this deep to the function they wrap (a cycle of `__wrapped__` ends there).
_MAX_UNWRAP = 16


def _defining_module(fn: Any) -> str:
    """The module of the code behind a table entry: through `functools.partial` (torch fills inductor's
    decomposition table with partials of its own functions, whose `__module__` is "functools") and
    `functools.wraps` wrappers (`register_lowering` wraps the function it is given)."""
    for _ in range(_MAX_UNWRAP):
        if isinstance(fn, functools.partial):
            fn = fn.func
            continue
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            break
        fn = inner
    return getattr(fn, "__module__", None) or ""


def _outside_torch(fn: Any) -> bool:
    module = _defining_module(fn)
    return not (module == "torch" or module.startswith("torch."))


def _registered_outside_torch(table: dict[Any, Any]) -> list[str]:
    names = set()
    for op, fn in list(table.items()):
        if _outside_torch(fn) and hasattr(op, "name"):
            try:
                names.add(op_name(op))
            except (TypeError, AttributeError):  # an OpOverloadPacket's name() takes no part here
                continue
    return sorted(names)


def compiler_customizations() -> dict[str, list[str]]:
    """{"decompositions": ops, "lowerings": ops, "passes": config settings}, each sorted; empty lists where
    the script changed nothing (or never imported inductor)."""
    decomposition = sys.modules.get("torch._inductor.decomposition")
    lowering = sys.modules.get("torch._inductor.lowering")
    config = sys.modules.get("torch._inductor.config")
    return {
        "decompositions": _registered_outside_torch(decomposition.decompositions) if decomposition else [],
        "lowerings": _registered_outside_torch(lowering.lowerings) if lowering else [],
        "passes": [name for name in PASS_SETTINGS if config is not None and _scripts_own(getattr(config, name, None))],
    }


def _scripts_own(setting: Any) -> bool:
    """Does a pass setting hold a pass of the script's, not the recorder's own (record/original_aten.py)?"""
    return setting is not None and not _recorders_own(setting)


def without_scripts_passes(setting: Any) -> Any:
    """A pass setting with the script's pass dropped: the recorder's own stays, else None."""
    return setting if _recorders_own(setting) else None


def _recorders_own(custom_pass: Any) -> bool:
    return bool(getattr(custom_pass, "tracediff_own_pass", False))


def no_customizations() -> dict[str, list[str]]:
    """What `compiler_customizations` says of a run that compiled nothing (the tables need not be read)."""
    return {"decompositions": [], "lowerings": [], "passes": []}
