"""Which nn.Module an op runs in, forward and backward, using torch's ModTracker.

ModTracker names modules by path from the root (`Net.block.act`) and follows
backward through autograd hooks. It skips modules running inside a compiled
region; there the module path comes from the FX graph instead (record/source).

Relies on ModTracker internals `_known_modules` and `_seen_modules` to name a
compiled `OptimizedModule` like the module it wraps (tests/test_torch_pins.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed._tools.mod_tracker import ModTracker


def _is_optimized_module(module: torch.nn.Module) -> bool:
    return isinstance(module, torch._dynamo.eval_frame.OptimizedModule)


class ModuleStack:
    """The innermost active module path, kept on this instance (no globals)."""

    def __init__(self) -> None:
        self._tracker = ModTracker()
        self._stack: list[str] = []
        self._tracker.register_user_hooks(
            pre_fw_hook=self._enter,
            post_fw_hook=lambda module, inputs, outputs: self._exit(module),
            pre_bw_hook=self._enter,
            post_bw_hook=lambda module, grads: self._exit(module),
        )

    def _enter(self, module: torch.nn.Module, _inputs: Any) -> None:
        if not _is_optimized_module(module):
            self._stack.append(self._tracker._get_mod_name(module))

    def _exit(self, module: torch.nn.Module) -> None:
        if _is_optimized_module(module):
            return
        name = self._tracker._get_mod_name(module)
        # Backward does not nest strictly (inputs without grad skip hooks): drop the
        # latest entry of this name rather than trusting the top.
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i] == name:
                del self._stack[i]
                return

    @property
    def current(self) -> str | None:
        if self._tracker.is_bw:
            # Backward hooks fire child-before-parent when they share an output
            # tensor, so the stack's top is unreliable there; ModTracker's names are
            # paths, and the deepest active one is the innermost module.
            active = [name for name in self._tracker.parents if name != "Global"]
            if active:
                return max(active, key=lambda name: (name.count("."), len(name)))
        return self._stack[-1] if self._stack else None

    @property
    def depth(self) -> int:
        return len(self._stack)

    @property
    def in_backward(self) -> bool:
        return bool(self._tracker.is_bw)

    def name_of(self, module: torch.nn.Module) -> str:
        return self._tracker._get_mod_name(module)

    def alias(self, wrapper: torch.nn.Module, wrapped: torch.nn.Module) -> None:
        """Name `wrapper` (an OptimizedModule) like the module it wraps."""
        name = self._tracker._get_mod_name(wrapped)
        self._tracker._known_modules[wrapper] = name
        self._tracker._seen_modules.add(wrapper)

    def __enter__(self) -> "ModuleStack":
        self._tracker.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._tracker.__exit__(*exc)
        self._stack.clear()
