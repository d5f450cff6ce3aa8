"""The original-op annotation of post-grad nodes as it reads in inductor's printed graph (no torch import).

`record/original_aten.py`'s pass puts it on each node; FX prints it in the summary comment above a run of nodes,
`# Annotation: {'tracediff_aten': 'threshold_backward'} File: ...`, cutting a value past 40 characters to its
first 40 and "...". `record/kernels.py` reads it back into each fused op's `orig`.
"""

from __future__ import annotations

import ast
import re

ANNOTATION_KEY = "tracediff_aten"
_SUMMARY_ANNOTATION = re.compile(r"^\s*# Annotation: (\{.*?\})(?: |$)")


def annotated_op(summary_row: str) -> str | None:
    """The original op a summary comment of the post-grad graph names (`aten::<op>`), if annotated."""
    match = _SUMMARY_ANNOTATION.match(summary_row)
    if not match:
        return None
    try:
        annotation = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError):
        return None
    name = annotation.get(ANNOTATION_KEY) if isinstance(annotation, dict) else None
    if not isinstance(name, str):
        return None
    return name if "::" in name else f"aten::{name}"
