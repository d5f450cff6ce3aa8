"""tracediff: find the first op whose numbers change between two PyTorch runs."""

from __future__ import annotations

__version__ = "0.1.0"

from tracediff.api import record  # noqa: E402
from tracediff.testing import assert_match  # noqa: E402

__all__ = ["__version__", "assert_match", "record"]
