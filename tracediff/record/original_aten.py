"""Which aten op each post-grad node was decomposed from, carried in inductor's own post-grad graph string.

A fused kernel's nodes are decomposed ops (`le`, `where`, `sub`, `mul`), and the string the recorder reads
them from (`inductor_post_grad_graph_str`, kept in inductor's caches) does not say which op each came from:
a kernel named for `threshold_backward` that writes batch norm backward's `(x - mean) * grad` cannot be told
from one that writes the ReLU's gradient (H200, a channels-last ResNet, BENCHMARKS.md issue 14). AOTAutograd
puts that op on each node as `meta["original_aten"]`; a post-grad pass copies it into the node's `custom`
annotation, which FX prints in that string (`# Annotation: {'tracediff_aten': 'threshold_backward'} File: ...`),
so it reaches warm cache loads as well (`aten_annotation.annotated_op` reads it back). The pass changes no node,
and its `uuid` keys inductor's caches.

Pinned torch internals (tests/test_torch_pins.py): `config.post_grad_custom_post_pass`, `CustomGraphPass`, the
`Annotation:` summary of `GraphModule.print_readable` (values over 40 characters cut).
"""

from __future__ import annotations

from typing import Any

import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from tracediff.record.aten_annotation import ANNOTATION_KEY


class OriginalAtenAnnotation(CustomGraphPass):
    """Copies each node's `original_aten` op name into its `custom` annotation."""

    tracediff_own_pass = True  # tells it from a script's own passes (record/customizations.py)

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            name = _short_name(node.meta.get("original_aten"))
            if name is not None:
                custom = node.meta.get("custom")
                node.meta["custom"] = {**(custom if isinstance(custom, dict) else {}), ANNOTATION_KEY: name}

    def uuid(self) -> str:
        return "tracediff-original-aten-v1"


def _short_name(op: Any) -> str | None:
    """`aten.threshold_backward.default` -> "threshold_backward" (printed within FX's 40 characters where it
    can), another namespace's op -> "mylib::op"."""
    name, namespace = getattr(op, "_opname", None), getattr(op, "namespace", None)
    if not isinstance(name, str) or not isinstance(namespace, str):
        return None
    return name if namespace == "aten" else f"{namespace}::{name}"


def with_annotation(current: Any) -> Any:
    """inductor's `post_grad_custom_post_pass` setting with the annotation pass, where the script set none.
    A script's own pass is left alone (its graphs then come without the ops' origins): torch before 2.13 takes
    one pass there, not a list."""
    return OriginalAtenAnnotation() if current is None else current
