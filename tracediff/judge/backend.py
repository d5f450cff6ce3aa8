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

from tracediff.judge.graph import CheckSink, JudgedGraph
from tracediff.judge.prefix import PrefixSearch


def copy_graph_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A GraphModule with its own copy of the graph, sharing the original's submodules and tensors."""
    graph = torch.fx.Graph()
    output = graph.graph_copy(gm.graph, {})
    graph.output(output)
    copy = torch.fx.GraphModule(gm, graph)
    copy.meta = dict(getattr(gm, "meta", {}))
    return copy


class JudgingBackend:
    """A dynamo backend: `inner` compiles, each compiled graph is judged, checks go to `sink`."""

    def __init__(self, inner: Callable[..., Any], sink: CheckSink, region_root: Callable[[], str | None],
                 label: str = "compiled", narrow: bool = True) -> None:
        self.inner = inner
        self.sink = sink
        self.narrow = narrow
        self.region_root = region_root
        self.label = label  # the compiled function's: `train_step (region 0)`
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
        reference = copy_graph_module(gm)
        compiled = self.inner(gm, example_inputs, **kwargs)
        name = f"{self.label} graph {self.graphs}"
        self.graphs += 1
        narrower = PrefixSearch(self.inner, self.region_root) if self.narrow else None
        return JudgedGraph(reference, compiled, name, self.sink, narrower)

    def __getattr__(self, name: str) -> Any:
        # What dynamo asks of a backend object (its compiler config, reset) is the inner backend's.
        return getattr(self.inner, name)


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
