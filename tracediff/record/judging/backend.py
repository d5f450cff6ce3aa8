"""The run's compile backend, wrapped so that each graph it compiles is judged call by call (graph.py).

Dynamo hands a backend each graph it captured; the wrapper keeps a copy of the graph as dynamo gave it (a
backend may rewrite the one it gets: inductor's pre-grad passes do) and returns, in place of the compiled
code, a `JudgedGraph` that runs it. What the backend returns is used unchanged, so the program runs the very
code it would have run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tracediff.record.judging.graph import CheckSink, JudgedGraph
from tracediff.record.judging.policy import JudgePolicy
from tracediff.record.judging.prefix import PrefixSearch


def reference_graph(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """The graph as dynamo gave it, with each tensor it reads as an attribute (an optimizer's parameters and
    state, which a compiled step updates in place) made an input after the others; and those tensors.

    A reference then runs on copies of what it writes, attributes included, and never on the program's own
    tensors; the compiled code keeps reading and writing the real ones."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    nodes = list(gm.graph.nodes)
    for node in nodes:
        if node.op == "placeholder":
            env[node] = graph.node_copy(node, lambda n: env[n])
    lifted: dict[str, torch.fx.Node] = {}
    attributes: list[torch.Tensor] = []
    for node in nodes:
        if node.op == "get_attr" and str(node.target) not in lifted:
            value = _attribute(gm, str(node.target))
            if isinstance(value, torch.Tensor):
                placeholder = graph.placeholder(f"attr_{len(attributes)}")
                placeholder.meta.update(node.meta)
                placeholder.meta["attribute"] = str(node.target)
                lifted[str(node.target)] = placeholder
                attributes.append(value)
    for node in nodes:
        if node.op == "placeholder":
            continue
        if node.op == "get_attr" and str(node.target) in lifted:
            env[node] = lifted[str(node.target)]
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    copy = torch.fx.GraphModule(gm, graph)
    copy.meta = dict(getattr(gm, "meta", {}))
    return copy, attributes


def _attribute(gm: torch.nn.Module, target: str) -> object:
    value: object = gm
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


class JudgingBackend:
    """A dynamo backend: `inner` compiles, each compiled graph is judged, checks go to `sink`."""

    def __init__(self, inner: Callable[..., Any], sink: CheckSink, label: str = "compiled", narrow: bool = True,
                 policy: JudgePolicy | None = None) -> None:
        self.inner = inner
        self.policy = policy or JudgePolicy()
        self.sink = sink
        self.narrow = narrow
        self.label = label  # the compiled function's: `train_step (region 0)`
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
        reference, attributes = reference_graph(gm)
        compiled = self.inner(gm, example_inputs, **kwargs)
        name = f"{self.label} graph {self.graphs}"
        self.graphs += 1
        narrower = PrefixSearch(self.inner) if self.narrow else None
        return JudgedGraph(reference, compiled, name, self.sink, narrower, attributes, self.policy,
                           unjudged_because=_compiled_autograd_graph())

    def __getattr__(self, name: str) -> Any:
        # What dynamo asks of a backend object (its compiler config, reset) is the inner backend's.
        return getattr(self.inner, name)


def _compiled_autograd_graph() -> str | None:
    """Why no call of the graph being compiled is judged, if it is a compiled autograd graph (the backward compiled
    autograd captured, which accumulates the gradients into `.grad` as it goes and returns nothing to compare); the
    trace rules still see its kernels. None for any other graph."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    if compile_id is not None and compile_id.compiled_autograd_id is not None:
        return "it is a backward that compiled autograd captured"
    return None


def inner_backend(compile_backend: str | Callable[..., Any], kwargs: dict[str, Any]) -> Callable[..., Any]:
    """The backend callable torch.compile would build from `backend=`, `mode=` and `options=` (taken out of
    `kwargs`), so it can be wrapped."""
    if compile_backend == "inductor":
        return torch._TorchCompileInductorWrapper(kwargs.pop("mode", None), kwargs.pop("options", None),
                                                  kwargs.get("dynamic"))
    if isinstance(compile_backend, str):
        from torch._dynamo import lookup_backend

        return lookup_backend(compile_backend)
    return compile_backend
