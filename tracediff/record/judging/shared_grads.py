"""Which outputs of a compiled call pass their incoming gradient on to another output's hook.

The judge keeps the gradient autograd feeds into each output of a compiled call (a tensor hook per output) and
feeds the same gradients into the uncompiled graph to differentiate the references. A tensor hook receives the
gradient of everything computed from its tensor, so two outputs can report one gradient twice:

- the same tensor returned at two positions: both hooks receive the whole gradient;
- an output computed from another output, as AOTAutograd returns a view of an output (`torch.distributions`'s
  `broadcast_all` gives such views): the gradient fed into the view reaches the other output's hook too.

Fed into the references once per position, such a gradient counted twice made a healthy VAE's compiled
backward wrong by the size of the gradient itself. The positions found here keep no gradient of their own: the
other output's carries theirs (for a view v = f(o), o's hook receives f's transpose of v's gradient, which is
what feeding v's gradient into v contributes through any graph that computes the same values).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

# Nodes walked from one output at most: the walk stops at the call's inputs, so only the call's own autograd graph
# is walked, but an input the judge does not tap leads back into the program's graph; past this, no more is found.
MAX_NODES = 10_000


def _edge(t: torch.Tensor, alive: list[Any]) -> tuple[int, int] | None:
    """The autograd edge a tensor's gradient enters by (its node and output number); None for a leaf. The node's
    Python object is kept in `alive`: freed, its id could come back as another node's."""
    if t.grad_fn is None:
        return None
    alive.append(t.grad_fn)
    return id(t.grad_fn), t.output_nr


def passed_on(outputs: Sequence[Any], positions: Sequence[int], inputs: Sequence[Any]) -> set[int]:
    """Of `positions` (outputs that require gradients), those whose gradient another output's hook also receives:
    a repeat of an earlier position's tensor, or an output computed from another output. `inputs`: the call's
    arguments, where the walk stops."""
    alive: list[Any] = []
    edges: dict[tuple[int, int], int] = {}  # an output's edge -> the first position with it
    repeated: set[int] = set()
    for i in positions:
        edge = _edge(outputs[i], alive)
        if edge is None:
            continue
        if edge in edges:
            repeated.add(i)
        else:
            edges[edge] = i
    stops = {edge[0] for t in inputs if isinstance(t, torch.Tensor) and (edge := _edge(t, alive)) is not None}
    derived = {i for i in positions if i not in repeated and _reaches_another(outputs[i], i, edges, stops)}
    return repeated | derived


def _reaches_another(output: torch.Tensor, position: int, edges: dict[tuple[int, int], int], stops: set[int]) -> bool:
    """Whether the output's gradient flows into another output's edge before it reaches the call's inputs."""
    if output.grad_fn is None:
        return False
    met = {id(output.grad_fn): output.grad_fn}  # every node met, by id; kept alive while ids are compared
    frontier = [output.grad_fn]
    while frontier and len(met) < MAX_NODES:
        node = frontier.pop()
        for next_node, number in node.next_functions:
            if next_node is None:
                continue
            owner = edges.get((id(next_node), number))
            if owner is not None and owner != position:
                return True
            if id(next_node) in stops or id(next_node) in met:
                continue
            met[id(next_node)] = next_node
            frontier.append(next_node)
    return False
