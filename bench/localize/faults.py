"""Plant one fault in a compiled graph: scale one node's output by (1 + delta).

A stand-in for a compiler bug in one op. The fault is a pass over the graph
the backend compiles (inductor's post-grad graph, or AOT autograd's graph for
the eager-executing backend), chosen by environment variables so that the
same script serves every fault:

    TRACEDIFF_PLANT       "G:N:SCALE"  scale eligible node N of the G-th graph compiled in
                          this process (0 = the first forward graph), and the same node (op, line,
                          which of that op at that line) in any graph compiled after it
    TRACEDIFF_PLANT_LIST  a file: append one JSON line per eligible node (the benchmark's menu)
    TRACEDIFF_PLANT_OUT   a folder: the script's results are saved there, as `a.pt` by a run the
                          fault never touched and `b.pt` by the first run it did

Eligible: an op producing a floating tensor, with a user source line, that can
change values (not a view, reshape, slice or copy). A scaled output is a
relative change of the same size whatever the tensor's magnitude.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_MOVES = {
    "view", "_unsafe_view", "reshape", "permute", "expand", "slice", "select", "squeeze", "unsqueeze", "t",
    "transpose", "as_strided", "clone", "alias", "detach", "_to_copy", "contiguous", "split", "split_with_sizes",
    "unbind", "getitem", "copy", "copy_", "view_as", "empty", "empty_like", "empty_strided", "full", "zeros",
    "ones", "arange", "lift_fresh_copy", "expand_as", "unsafe_split", "cat", "stack",
}


def source_of(node: torch.fx.Node) -> str | None:
    """`file.py:line` of the innermost frame outside torch, as tracediff names a source."""
    frames = [m for m in _FRAME.finditer(node.meta.get("stack_trace") or "")
              if not m.group("file").startswith(_TORCH_DIR)]
    if not frames:
        return None
    return f"{os.path.basename(frames[-1].group('file'))}:{frames[-1].group('line')}"


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    name = getattr(target, "_opname", None) or getattr(target, "__name__", str(target))
    return name.split(".")[0]


def eligible(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return (node.op == "call_function" and isinstance(value, torch.Tensor) and value.dtype.is_floating_point
            and value.numel() > 0 and _op_name(node) not in _MOVES and source_of(node) is not None)


@dataclass
class PlantedFault(CustomGraphPass):
    """The pass; `graphs` counts the graphs seen in this process (forward first, then backward)."""

    plant: tuple[int, int, float] | None
    listing: str | None
    graphs: int = 0
    planted: list[str] = field(default_factory=list)
    # The planted node as any graph compiled later can hold it too: a compiler bug in an op is there wherever
    # the backend compiles that op again (the judge's prefix search compiles parts of the faulty graph).
    signature: tuple[str, str | None, bool, int] | None = None

    @classmethod
    def from_env(cls) -> PlantedFault:
        spec = os.environ.get("TRACEDIFF_PLANT")
        plant = None
        if spec:
            g, n, scale = spec.split(":")
            plant = (int(g), int(n), float(scale))
        return cls(plant, os.environ.get("TRACEDIFF_PLANT_LIST"))

    def __call__(self, graph: torch.fx.Graph) -> None:
        index = self.graphs
        self.graphs += 1
        nodes = [n for n in graph.nodes if eligible(n)]
        backward = any(n.op == "placeholder" and n.name.startswith("tangents") for n in graph.nodes)
        if self.listing:
            with open(self.listing, "a", encoding="utf-8") as f:
                for k, node in enumerate(nodes):
                    f.write(json.dumps({"graph": index, "node": k, "name": node.name, "op": _op_name(node),
                                        "source": source_of(node), "backward": backward}) + "\n")
        if self.plant is None:
            return
        if self.plant[0] == index and self.plant[1] < len(nodes):
            node = nodes[self.plant[1]]
            self.signature = _signature(node, nodes, backward)
        else:
            node = next((n for n in nodes if _signature(n, nodes, backward) == self.signature), None)
            if node is None:
                return
        with graph.inserting_after(node):
            scaled = graph.call_function(torch.ops.aten.mul.Tensor, (node, self.plant[2]))
        scaled.meta.update(node.meta)  # a pass keeps the node's provenance
        node.replace_all_uses_with(scaled, delete_user_cb=lambda user: user is not scaled)
        self.planted.append(node.name)

    def uuid(self) -> bytes:
        # Part of inductor's cache key: every fault compiles anew.
        with open(__file__, "rb") as f:
            text = f.read()
        return hashlib.sha256(text + repr((self.plant, self.listing)).encode()).digest()


def _signature(node: torch.fx.Node, nodes: list[torch.fx.Node], backward: bool) -> tuple[str, str | None, bool, int]:
    """A node as another graph holding the same op from the same line holds it: its op, source line, whether the
    graph is a backward, and which of the eligible nodes with that op and line it is."""
    op, source = _op_name(node), source_of(node)
    same = [n for n in nodes if _op_name(n) == op and source_of(n) == source]
    return op, source, backward, same.index(node)


def _fault() -> PlantedFault:
    fault = getattr(torch, "_tracediff_bench_fault", None)  # one per process, however often imported
    if fault is None:
        fault = PlantedFault.from_env()
        torch._tracediff_bench_fault = fault  # type: ignore[attr-defined]
    return fault


def install_for_inductor() -> None:
    """Plant through inductor's own config: the backend stays plain `inductor`."""
    import torch._inductor.config as inductor_config

    inductor_config.post_grad_custom_post_pass = _fault()


def compile_fx_planted(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A custom backend around inductor's compile_fx, planting through its config patches."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, config_patches={"post_grad_custom_post_pass": _fault()})


def _planted_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    _fault()(gm.graph)
    gm.recompile()
    return gm.forward


def aot_eager_planted(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """aot_eager with the fault planted in AOT autograd's forward and backward graphs."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=_planted_graph, bw_compiler=_planted_graph)(gm, example_inputs)


def save_results(tensors: list[torch.Tensor]) -> None:
    folder = os.environ.get("TRACEDIFF_PLANT_OUT")
    if not folder:
        return
    path = os.path.join(folder, "b.pt" if _fault().planted else "a.pt")
    if not os.path.exists(path):  # a narrowing re-run does not overwrite the first faulty run
        torch.save([t.detach().double().cpu() for t in tensors], path)
