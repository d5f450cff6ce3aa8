"""The collector's allowance for records a recording holds (record/held_gc.py)."""

from __future__ import annotations

import gc

import pytest

from tracediff.record.held_gc import HeldRecordsAllowance


@pytest.fixture
def threshold():
    saved = gc.get_threshold()
    yield saved
    gc.set_threshold(*saved)


def test_holding_raises_the_first_threshold_once_and_release_puts_it_back(threshold) -> None:
    allowance = HeldRecordsAllowance(5000)
    allowance.hold()
    allowance.hold()
    assert gc.get_threshold() == (threshold[0] + 5000, *threshold[1:])
    allowance.release()
    assert gc.get_threshold() == threshold
    allowance.release()
    assert gc.get_threshold() == threshold


def test_a_threshold_the_program_set_meanwhile_is_kept(threshold) -> None:
    allowance = HeldRecordsAllowance(5000)
    allowance.hold()
    gc.set_threshold(123, *threshold[1:])
    allowance.release()
    assert gc.get_threshold()[0] == 123


def test_automatic_collection_turned_off_stays_off(threshold) -> None:
    gc.set_threshold(0, *threshold[1:])
    allowance = HeldRecordsAllowance(5000)
    allowance.hold()
    assert gc.get_threshold()[0] == 0
    allowance.release()
    assert gc.get_threshold()[0] == 0
