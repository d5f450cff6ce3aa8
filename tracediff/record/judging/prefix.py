"""The node that makes a wrong compiled call wrong: bisection over the graph's prefixes.

Prefix k is the graph cut after its k-th computing node, returning every value live across the cut. It is
compiled by the run's own backend and judged like a whole call (`measure.py`), on the wrong call's very
inputs and random state. A fault at node j shows in every prefix that holds j and in none that does not, so
a binary search finds j in about log2(nodes) compiles. For a wrong backward the prefix is differentiated with
the gradients eager's whole graph gives the values at the cut (the same incoming gradients the real backward
had), so only the backward of the nodes inside the prefix is the compiled code's.

The answer is a pair of verified prefixes: k-1 right, k wrong. Fusion differs between prefixes, so a fault
that needs a particular fusion may show in no prefix short of the whole graph; the culprit is then the last
node, and the record says the search could not narrow further.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tracediff.judge.measure import any_wrong, measure
from tracediff.op_names import op_name
from tracediff.record.judging.graph import (
    Autocast,
    copies,
    differentiable_inputs,
    differentiable_leaf,
    is_float,
    outputs_of,
)
from tracediff.record.source import node_info
from tracediff.record.upcast import Float64Upcast

if TYPE_CHECKING:
    from tracediff.record.judging.graph import JudgedGraph, RngState

_COMPUTING = ("call_function", "call_method", "call_module")
# aten ops that only re-describe memory: never the culprit while the value they show has a producer.
_LAYOUT_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::permute", "aten::transpose", "aten::t",
    "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice", "aten::alias",
    "aten::flatten", "aten::unflatten", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::narrow",
    "aten::contiguous", "aten::clone", "aten::detach", "aten::as_strided", "aten::unbind", "aten::view_as",
    "aten::expand_as", "aten::lift_fresh"})


def computing_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op in _COMPUTING]


def _tensor_values(node: torch.fx.Node) -> list[int | None]:
    """Which parts of a node's value are tensors: [None] for a tensor, [0, 2] for a tuple holding tensors there."""
    value = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(value, torch.Tensor):
        return [None]
    if isinstance(value, (tuple, list)):
        return [i for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
    return []


def prefix_module(gm: torch.fx.GraphModule, k: int, whole: bool = False) -> tuple[torch.fx.GraphModule, int]:
    """The graph up to and including its k-th computing node, returning every tensor used past it; and the
    position of the first of those among its outputs (0). `whole`: the whole graph, returning its own outputs
    first and those values after them."""
    nodes = list(gm.graph.nodes)
    cut = computing_nodes(gm)[k]
    before = nodes[:nodes.index(cut) + 1]
    before_set = set(before)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    output = next(n for n in nodes if n.op == "output")
    for node in nodes if whole else before:
        if node is not output:
            env[node] = graph.node_copy(node, lambda n: env[n])
    returned: list[Any] = list(torch.fx.map_arg(output.args[0], lambda n: env[n])) if whole else []
    first_cut = len(returned)
    live = [n for n in before if n.op in _COMPUTING and (n is cut or any(u not in before_set for u in n.users))]
    for node in live:
        for part in _tensor_values(node):
            returned.append(env[node] if part is None else graph.call_function(operator.getitem, (env[node], part)))
    graph.output(tuple(returned))
    return torch.fx.GraphModule(gm, graph), first_cut


class _OpsSeen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.ops.append(op_name(func))
        return func(*args, **(kwargs or {}))


def _node_ops(gm: torch.fx.GraphModule, inputs: Sequence[Any], target: torch.fx.Node) -> list[str]:
    """The aten ops `target` dispatches when the graph runs on `inputs`."""
    seen = _OpsSeen()

    class Interpreter(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            if n is not target:
                return super().run_node(n)
            with seen:
                return super().run_node(n)

    with torch.no_grad():
        Interpreter(gm).run(*inputs)  # not the module's __call__: no module hooks
    return seen.ops


class PrefixSearch:
    """Narrows one wrong call (forward or backward) of a judged graph to a node."""

    def __init__(self, backend: Callable[..., Any]) -> None:
        self.backend = backend

    def __call__(self, graph: JudgedGraph, inputs: list[Any], rng: RngState,
                 tangents: list[torch.Tensor | None] | None) -> dict[str, Any] | None:
        gm = graph.reference
        nodes = computing_nodes(gm)
        if not nodes:
            return None
        grad_mode = torch.is_grad_enabled() or tangents is not None
        cut_grads = _CutGradients(gm, inputs, rng, tangents) if tangents is not None else None

        wrong_at: dict[int, set[str]] = {}  # what was wrong in each prefix tried: "values", "writes"

        def wrong(k: int) -> bool:
            wrong_at[k] = self._prefix_wrong(gm, k, inputs, rng, graph.written or [], grad_mode, cut_grads)
            return bool(wrong_at[k])

        steps = 0
        lo, hi = -1, len(nodes) - 1  # prefix lo is right (the empty one), hi is wrong
        reproduced = wrong(hi)
        steps += 1
        if not reproduced:
            return {"how": "prefix", "steps": steps, "note": "the whole graph compiled again was right: not narrowed"}
        while hi - lo > 1:
            mid = (lo + hi) // 2
            steps += 1
            if wrong(mid):
                hi = mid
            else:
                lo = mid
        culprit = self._describe(graph, nodes[hi], inputs, steps, hi == len(nodes) - 1)
        # Confirmed where the cut's values were wrong (a write shows only at the end of the whole graph).
        if cut_grads is None and hi < len(nodes) - 1 and wrong_at[hi] == {"values"} and not self._prefix_wrong(
                gm, hi, inputs, rng, graph.written or [], grad_mode, None, whole=True):
            # Wrong as a prefix's last op, right inside the whole graph: a fault tied to the graph's shape (a pass
            # on whatever op ends it), not to this op. Said, and not pinned.
            culprit["unconfirmed"] = True
            culprit["note"] = "; ".join(filter(None, (culprit.get("note"), (
                "its value is right inside the whole graph compiled with it as an extra output: the fault follows "
                "the graph's shape (the op ending it?), not this op"))))
        return culprit

    def _prefix_wrong(self, gm: torch.fx.GraphModule, k: int, inputs: list[Any], rng: RngState, written: list[int],
                      grad_mode: bool, cut_grads: _CutGradients | None, whole: bool = False) -> set[str]:
        """Prefix k, compiled and judged on the call's inputs: what was wrong, "values" (the values live at the
        cut) and "writes" (inputs it writes in place); empty where it is right. `whole`: the whole graph with the
        values live at the cut as extra outputs, judged on those alone."""
        prefix, first_cut = prefix_module(gm, k, whole)
        examples = inputs if cut_grads is None else \
            [differentiable_leaf(a) if i in cut_grads.tapped else a for i, a in enumerate(inputs)]
        # The backend gets a prefix of its own: it may rewrite what it is given (inductor's passes do).
        compiled = self._compile(prefix_module(gm, k, whole)[0], examples, grad_mode)
        fed = cut_grads.fed_at(prefix) if cut_grads is not None else None
        results: list[tuple[list[Any], list[Any]]] = []
        for run in ("float64", "eager", "compiled"):
            args = copies(inputs, written)
            upcast = _float64() if run == "float64" else None
            leaves: dict[int, torch.Tensor] = {}
            if cut_grads is not None:
                args, leaves = differentiable_inputs(args, cut_grads.tapped, upcast)
            rng.restore()
            try:
                with torch.set_grad_enabled(grad_mode), upcast or contextlib.nullcontext():
                    out = list(compiled(*args) if run == "compiled" else prefix.forward(*args))
                    if cut_grads is not None and fed is not None:
                        out = cut_grads.input_grads(fed, out, [leaves[i] for i in cut_grads.tapped])
            except Exception:
                if run != "float64":
                    raise
                results.append(([], []))  # no float64 reference for this prefix: judged against eager
                continue
            results.append((out, [args[i] for i in written]))
        if not results[0][0] and results[1][0]:
            results[0] = results[1]
        (r_out, r_in), (e_out, e_in), (c_out, c_in) = results
        values = zip(c_out[first_cut:], e_out[first_cut:], r_out[first_cut:])
        wrong = set()
        computes_in = Autocast().computes_in  # the program's, as the call (or its backward) ran under it
        if any_wrong((measure(f"v{i}", c, e, r) for i, (c, e, r) in enumerate(values)), computes_in):
            wrong.add("values")
        # The whole graph's writes are its final ones, not the cut's.
        if not whole and any_wrong((measure(f"w{i}", c, e, r) for i, (c, e, r) in enumerate(zip(c_in, e_in, r_in))),
                                   computes_in):
            wrong.add("writes")
        return wrong

    def _compile(self, prefix: torch.fx.GraphModule, inputs: list[Any], grad_mode: bool) -> Callable[..., Any]:
        """The prefix compiled by the backend itself, as dynamo would hand it over (not through torch.compile:
        dynamo would trace the recorder's module hooks around it)."""
        with torch.set_grad_enabled(grad_mode):
            return self.backend(prefix, list(inputs))

    def _describe(self, graph: JudgedGraph, node: torch.fx.Node, inputs: list[Any], steps: int,
                  last: bool) -> dict[str, Any]:
        gm = graph.reference
        ops = _node_ops(gm, copies(inputs), node)
        # A view or copy shows a value its producer made: blame the producer.
        while ops and all(op.split(".")[0] in _LAYOUT_OPS for op in ops):
            producers = [a for a in node.all_input_nodes if a.op in _COMPUTING]
            if not producers:
                break
            node = producers[0]
            ops = _node_ops(gm, copies(inputs), node)
        info = node_info(node, type(gm).__name__)
        root = graph.root  # the forward's region (a backward runs outside it)
        module = ".".join(p for p in (root, info.module) if p) or None
        culprit: dict[str, Any] = {"how": "prefix", "steps": steps, "node": node.name,
                                   "op": next((op for op in ops if op.split(".")[0] not in _LAYOUT_OPS),
                                              ops[0] if ops else str(node.target)),
                                   "ops": sorted(set(ops)), "m": module}
        notes = []
        source = info.source
        if source is None and graph.site is not None:
            # The node's own frames are all torch's (an optimizer's step): the program's line that made the call.
            source = graph.site
            notes.append("the op's own line is inside torch; the line named made the compiled call")
        if source is not None:
            culprit.update(src=source.short, path=source.path, code=source.code)
        if last:
            notes.append("the last node: no shorter prefix was wrong (the fault may need the whole graph's fusion)")
        if notes:
            culprit["note"] = "; ".join(notes)
        return culprit


def _float64() -> Float64Upcast:
    return Float64Upcast(exact_casts=True)


class _CutGradients:
    """The gradients eager's whole graph gives the values live at each cut, for the backward's incoming ones."""

    def __init__(self, gm: torch.fx.GraphModule, inputs: list[Any], rng: RngState,
                 tangents: list[torch.Tensor | None]) -> None:
        self.tapped = [i for i, a in enumerate(inputs) if is_float(a) and a.requires_grad]
        leaves = {i: differentiable_leaf(inputs[i]) for i in self.tapped}
        self.values: dict[torch.fx.Node, Any] = {}
        values = self.values

        class Keep(torch.fx.Interpreter):
            def run_node(self, n: torch.fx.Node) -> Any:
                values[n] = super().run_node(n)
                return values[n]

        rng.restore()
        with torch.enable_grad():
            outs = outputs_of(Keep(gm).run(*[leaves.get(i, a) for i, a in enumerate(inputs)]))
        self.by_name = {n.name: v for n, v in values.items()}
        self.pairs = [(o, g) for o, g in zip(outs, tangents)
                      if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]

    def fed_at(self, prefix: torch.fx.GraphModule) -> list[tuple[int, torch.Tensor]]:
        """The gradients eager's whole graph gives the values the prefix returns: (position, gradient)."""
        cut = [n for n in prefix.graph.nodes if n.op == "output"][0].args[0]
        originals = [(i, self._original(n)) for i, n in enumerate(cut)]
        wanted = [(i, v) for i, v in originals if isinstance(v, torch.Tensor) and v.requires_grad]
        if not wanted or not self.pairs:
            return []
        fed = torch.autograd.grad([o for o, _ in self.pairs], [v for _, v in wanted], [g for _, g in self.pairs],
                                  allow_unused=True, retain_graph=True)
        return [(i, g.detach()) for (i, _), g in zip(wanted, fed) if g is not None]

    @staticmethod
    def input_grads(fed: list[tuple[int, torch.Tensor]], out: list[Any], leaves: list[torch.Tensor]) -> list[Any]:
        """The prefix's input gradients, fed at the cut with eager's gradients there."""
        pairs = [(out[i], g) for i, g in fed if isinstance(out[i], torch.Tensor) and out[i].requires_grad]
        if not pairs:
            return [torch.zeros_like(leaf) for leaf in leaves]
        grads = torch.autograd.grad([o for o, _ in pairs], leaves, [g.to(o.dtype) for o, g in pairs], allow_unused=True)
        return [torch.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves, grads)]

    def _original(self, node: torch.fx.Node) -> Any:
        """The whole graph's value for a node of a prefix (copied nodes keep their names)."""
        if node.op == "call_function" and node.target is operator.getitem:
            base, index = self._original(node.args[0]), node.args[1]  # type: ignore[arg-type]
            return base[index] if isinstance(base, (tuple, list)) and isinstance(index, int) else None
        return self.by_name.get(node.name)
