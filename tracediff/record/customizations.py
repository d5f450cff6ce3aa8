"""What a script changed in inductor itself: decompositions and lowerings it registered, passes it set.

Read at the end of a recording (the trace's footer), from the modules already
imported: a script that never imported inductor changed none of it, and this
does not import it either. `tracediff fix` turns each into a change to try
(drop the decomposition, the lowering or the pass).
"""

from __future__ import annotations

import sys
from typing import Any

from tracediff.op_names import op_name

# inductor's config settings that hold a script's own graph passes.
PASS_SETTINGS = ("pre_grad_custom_pass", "joint_custom_pre_pass", "joint_custom_post_pass",
                 "post_grad_custom_pre_pass", "post_grad_custom_post_pass")


def _outside_torch(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or getattr(getattr(fn, "func", None), "__module__", None) or ""
    return not (module == "torch" or module.startswith("torch."))


def _registered_outside_torch(table: dict[Any, Any]) -> list[str]:
    names = set()
    for op, fn in list(table.items()):
        if hasattr(op, "name") and _outside_torch(fn):
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
        "passes": [name for name in PASS_SETTINGS if config is not None and getattr(config, name, None) is not None],
    }
