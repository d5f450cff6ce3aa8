"""A reference graph with its activation checkpoints inlined.

Dynamo turns `torch.utils.checkpoint` into `tag_activation_checkpoint(body, *args)`, whose eager implementation
checkpoints with `preserve_rng_state=False` (inductor keeps the state by its own RNG functionalization instead). Run
as a reference, its backward recomputed the body's random ops with fresh numbers, so its dropout masks were not its
forward's: a compiled backward that was right, bit for bit, was judged 44% wrong (`bench/real_programs/
ckpt_attention_dropout.py`, under aot_eager and inductor alike). A reference has no memory to save: the body is
called as it is, and autograd keeps what the backward needs.

Pinned torch internals (tests/test_torch_pins.py): torch.ops.higher_order.tag_activation_checkpoint, called with
the body's graph first.
"""

from __future__ import annotations

from typing import Any

import torch


def _call_body(body: torch.fx.GraphModule, *args: Any, **_checkpoint_options: Any) -> Any:
    # `forward`, not `__call__`: the recorder's global module hooks stay out of a reference (graph.py's run_graph).
    return body.forward(*args)


def with_checkpoints_inlined(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` itself where it checkpoints nothing; else a copy sharing its modules and tensors, whose checkpoints call
    their bodies directly."""
    hop = getattr(torch.ops.higher_order, "tag_activation_checkpoint", None)
    if hop is None or not any(node.op == "call_function" and node.target is hop for node in gm.graph.nodes):
        return gm
    inlined = torch.fx.GraphModule(gm, _copy_graph(gm.graph))
    for node in inlined.graph.nodes:
        if node.op == "call_function" and node.target is hop:
            node.target = _call_body
    inlined.recompile()
    return inlined


def _copy_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    copied = torch.fx.Graph()
    output = copied.graph_copy(graph, {})
    copied.output(output)
    return copied
