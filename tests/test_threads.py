"""Threads the program starts are not recorded and never disturb the recording thread's trace.

The dispatch mode is thread-local, so another thread's ops never reach the
recorder; its module calls, compiled-region calls and kernel launches must
stay out as well. Events order the threads: no sleeps.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch
import torch.nn as nn

import tracediff
from tracediff.trace.reader import read_trace


class _Waiting(nn.Module):
    """Signals `entered` from inside its forward, then waits for `release`."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.entered.set()
        self.release.wait()
        return x + 1


def _records(path: Path) -> list[dict]:
    return read_trace(path)[1]


def test_a_module_running_on_another_thread_does_not_own_the_main_threads_ops(tmp_path: Path) -> None:
    waiting = _Waiting()

    class Outer(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            other = threading.Thread(target=waiting, args=(x,))
            other.start()
            waiting.entered.wait()  # the other thread is inside _Waiting.forward now
            y = x.cos()
            waiting.release.set()
            other.join()
            return y

    with tracediff.record(tmp_path / "t.jsonl"):
        Outer()(torch.ones(3))
    (cos,) = [r for r in _records(tmp_path / "t.jsonl") if r.get("op") == "aten::cos"]
    assert cos["m"] == "Outer"
    assert not any(r.get("op") == "aten::add.Tensor" for r in _records(tmp_path / "t.jsonl"))


def test_compiled_calls_on_another_thread_leave_no_records(tmp_path: Path) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin() * 2

    with tracediff.record(tmp_path / "t.jsonl", backend="eager"):
        cf = torch.compile(f)
        a = cf(torch.ones(3))
        other = threading.Thread(target=lambda: cf(torch.ones(4)))
        other.start()
        other.join()
        b = cf(torch.ones(3))
    records = _records(tmp_path / "t.jsonl")
    regions = [r for r in records if r["t"] == "region"]
    # Two calls on the main thread, numbered 0 and 1: the other thread's call is not one of them.
    assert [(r["ev"], r["call"]) for r in regions] == [("enter", 0), ("exit", 0), ("enter", 1), ("exit", 1)]
    assert not any(t["sh"] == [4] for r in records for t in (*r.get("in", ()), *r.get("out", ())))
    assert [r["i"] for r in records] == list(range(len(records)))
    assert torch.equal(a, b)


def test_threaded_prefetch_script_matches(run_fixture) -> None:
    result = run_fixture("threaded_prefetch.py", "eager,aot_eager")
    assert result.exit_code == 0 and result.report["verdict"] == "match", result.stdout
