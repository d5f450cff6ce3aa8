"""Every script of fixtures/clean/ matches under inductor (tests/clean_scripts.py says why and how)."""

from __future__ import annotations

import pytest

from tests.clean_scripts import assert_matches, batched_checks, params

checked = batched_checks("inductor", "test_matches_under_inductor")


@pytest.mark.slow
@pytest.mark.parametrize("script", params("inductor"))
def test_matches_under_inductor(script: str, checked) -> None:
    assert_matches(checked(script))
