"""tracediff: find the first op whose numbers change between two PyTorch runs."""

from __future__ import annotations

from tracediff._version import package_version
from tracediff.api import record
from tracediff.testing import assert_match

__version__ = package_version()

__all__ = ["__version__", "assert_match", "record"]
