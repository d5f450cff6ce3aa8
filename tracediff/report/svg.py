"""What the report's inline SVG plots share."""

from __future__ import annotations

import math


def ticks(span: int, target: int = 8) -> list[int]:
    """Round tick positions from 0 to `span`, about `target` of them (steps of 1, 2 or 5 times a power of ten)."""
    raw = max(span / target, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return list(range(0, span + 1, int(step)))
