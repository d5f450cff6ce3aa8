"""pytest plugin (entry point `pytest11: tracediff`): the `tracediff` fixture.

    def test_mlp_under_inductor(tracediff):
        tracediff.assert_match(mlp, (x,), backend="inductor")

Like `tracediff.assert_match`, with the traces written under the test's own
`tmp_path`: removed when the function matches, kept on failure, and the
failure message names them. Importing this module imports neither torch nor
tracediff's recorder, so loading the plugin costs nothing in test runs that
do not use the fixture. Disable with `-p no:tracediff`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


class TraceDiffFixture:
    """What the `tracediff` fixture returns: `assert_match` with traces under the test's tmp_path."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.calls = 0

    def assert_match(self, fn: Callable[..., Any], inputs: Any, backend: str | Callable[..., Any] = "inductor",
                     **options: Any) -> dict[str, Any]:
        """See `tracediff.assert_match`; each call gets its own directory `tracediff/<n>/`."""
        from tracediff.testing import assert_match

        self.calls += 1
        directory = self.base / str(self.calls)
        report = assert_match(fn, inputs, backend, trace_dir=directory, **options)
        shutil.rmtree(directory, ignore_errors=True)  # reached only on a match: nothing to look at
        return report


@pytest.fixture
def tracediff(tmp_path: Path) -> TraceDiffFixture:
    """Assert that a function matches eager under a torch.compile backend, with tracediff's report on failure."""
    return TraceDiffFixture(tmp_path / "tracediff")
