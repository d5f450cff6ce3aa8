"""Compile with inductor as usual, but give every aten op its own kernel and buffer.

Used to narrow a divergence inside a fused kernel to one op: every
intermediate value becomes a buffer that a kernel record fingerprints.
Inductor has no single switch for this. Pointwise ops are inlined into their
consumer while lowering, before the scheduler decides fusion, so the
`realize_*` thresholds and `max_fusion_size` alone do not split a chain; the
lowering of each FX node is realized here, fusion is capped at one node, and
the C++ scheduler flushes its kernel group after every node (it otherwise
packs consecutive nodes into one function).

Everything else (decompositions, pattern passes, custom passes, lowerings)
stays as it is, so a fault in any of them still shows. The patches are not
part of inductor's cache keys, so the FX graph and AOTAutograd caches are
bypassed while active. The caches keyed by generated source (each kernel's
compiled binary) and the precompiled headers are still used: a re-run does not
rebuild them (`force_disable_caches` would, in a new directory each compile).

Pinned torch internals: GraphLowering.run_node, ir.TensorBox/StorageBox,
CppScheduling.MAX_FUSED_KERNEL_ARGS_NUM (tests/test_torch_pins.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_KNOBS = {
    "max_fusion_size": 1,
    "epilogue_fusion": False,
    "allow_buffer_reuse": False,
    "inplace_buffers": False,
    # The patches below are in no cache key: no FX graph (nor AOTAutograd, below) cache entry made
    # without them may be used, nor one made with them kept for later compiles.
    "fx_graph_cache": False,
}


@contextlib.contextmanager
def materialize_all() -> Iterator[None]:
    """While active, inductor compiles one kernel per aten op."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor import ir
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.graph import GraphLowering

    original_run_node = GraphLowering.run_node

    def run_node(self: Any, node: Any) -> Any:
        result = original_run_node(self, node)
        if node.op == "call_function" and isinstance(result, ir.TensorBox) and isinstance(result.data, ir.StorageBox):
            result.realize()
        return result

    original_max_args = CppScheduling.MAX_FUSED_KERNEL_ARGS_NUM
    GraphLowering.run_node = run_node  # type: ignore[method-assign,assignment]
    CppScheduling.MAX_FUSED_KERNEL_ARGS_NUM = 0
    try:
        with inductor_config.patch(_KNOBS), functorch_config.patch(enable_autograd_cache=False):
            yield
    finally:
        GraphLowering.run_node = original_run_node  # type: ignore[method-assign]
        CppScheduling.MAX_FUSED_KERNEL_ARGS_NUM = original_max_args
