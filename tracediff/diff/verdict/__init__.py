"""Pass 2 of a diff: walk trace A in order and find the first divergence (walk.py's `find_divergence`)."""

from tracediff.diff.verdict.divergence import DiffResult, Divergence
from tracediff.diff.verdict.walk import find_divergence

__all__ = ["DiffResult", "Divergence", "find_divergence"]
