"""Whether a diff may hand part of its work to a forked second process (pass 1 of trace B, B's side of the walk)."""

from __future__ import annotations

import multiprocessing
import os


def can_fork_a_helper() -> bool:
    """A second core to run it, `fork` to start it with the diff's state as it is (the keys hash strings with
    this interpreter's secret), and not a daemon process, which may start none."""
    return ((os.cpu_count() or 1) >= 2 and "fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)
