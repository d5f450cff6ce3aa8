"""tracediff's version, read from the installed package's metadata (pyproject.toml is the one place it is set)."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version


@functools.cache  # reading the metadata scans the installed distributions: about half a millisecond
def package_version() -> str:
    try:
        return version("tracediff")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"
