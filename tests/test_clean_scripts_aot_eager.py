"""Every script of fixtures/clean/ matches under aot_eager (tests/clean_scripts.py says why and how)."""

from __future__ import annotations

import pytest

from tests.clean_scripts import SCRIPTS, assert_matches, batched_checks, params

checked = batched_checks("aot_eager", "test_matches_under_aot_eager")


def test_the_set_is_there() -> None:
    assert len(SCRIPTS) >= 12, SCRIPTS


@pytest.mark.parametrize("script", params("aot_eager"))
def test_matches_under_aot_eager(script: str, checked) -> None:
    assert_matches(checked(script))
