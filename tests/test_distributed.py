"""Distributed runs (torchrun): each rank recorded into a trace of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tracediff.outputs import rank_path, rank_pattern
from tracediff.trace.reader import Trace, read_footer


def test_a_rank_writes_a_trace_named_for_it() -> None:
    launch = {"RANK": "1", "WORLD_SIZE": "2"}
    assert rank_path(Path("out/t.jsonl"), launch) == Path("out/t.rank1.jsonl")
    assert rank_path(Path("t.jsonl.gz"), launch) == Path("t.rank1.jsonl.gz")
    assert rank_path(Path("run/a-eager.jsonl.zst"), launch) == Path("run/a-eager.rank1.jsonl.zst")
    assert rank_pattern(Path("run/a-eager.jsonl.zst")) == str(Path("run/a-eager.rank*.jsonl.zst"))
    assert rank_path(Path("trace"), launch) == Path("trace.rank1")
    assert rank_path(Path("t.jsonl"), {"RANK": "0", "WORLD_SIZE": "1"}) == Path("t.jsonl")
    assert rank_path(Path("t.jsonl"), {}) == Path("t.jsonl")


@pytest.mark.slow
def test_record_under_an_outside_torchrun_writes_one_trace_per_rank(tmp_path: Path) -> None:
    """`torchrun ... -m tracediff.cli record`: users with their own launch scripts. Before, both ranks
    wrote the same file, and it read back as broken JSON."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29517",
               "-m", "tracediff.cli", "record", str(FIXTURES / "ddp_step.py"), "--backend", "eager",
               "-o", str(tmp_path / "t.jsonl")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        trace = Trace(tmp_path / f"t.rank{rank}.jsonl")
        assert (trace.header["rank"], trace.header["world_size"]) == (rank, 2)
        ops = [r for r in trace if r["t"] == "op"]
        reductions = [r for r in ops if r["op"] == "c10d::allreduce_"]
        assert len(reductions) == 3  # DDP's gradient bucket in each of two steps, and the script's own
        assert not trace.truncated
        # The script's all_reduce: what it was given is read; what it wrote is not, while in flight (gloo
        # writes it from a thread of its own), and is a new value, which the `sum` after it reads.
        given, = reductions[-1]["in"]
        wrote, = reductions[-1]["out"]
        assert given["fp"]["sum"] == 3.0 * (rank + 1) and wrote["fp"] is None and wrote["unread"]
        assert (wrote["id"], wrote["v"]) != (given["id"], given["v"])
        summed = next(r for r in ops if r["op"] == "aten::sum" and r["in"][0]["id"] == wrote["id"])
        assert summed["in"][0]["v"] == wrote["v"] and summed["out"][0]["fp"]["sum"] == 9.0
        # A functional collective's output is read once `wait_tensor` returns it, never before.
        functional = next(r for r in ops if r["op"] == "_c10d_functional::all_reduce")
        pending = functional["out"][0]["id"]
        before_wait = [t for r in ops if r["op"] != "_c10d_functional::wait_tensor"
                       for t in r["in"] if t["id"] == pending and r["i"] < _index_of_wait(ops, pending)]
        assert before_wait and all(t["fp"] is None for t in before_wait)
        waited = next(r for r in ops if r["op"] == "_c10d_functional::wait_tensor")
        assert waited["out"][0]["id"] == pending and waited["out"][0]["fp"]["sum"] == 18.0
    assert not (tmp_path / "t.jsonl").exists()


def _index_of_wait(ops: list[dict], tensor: int) -> int:
    return next(r["i"] for r in ops if r["op"] == "_c10d_functional::wait_tensor" and r["in"][0]["id"] == tensor)


def test_the_launchers_bookkeeping_is_no_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun sets TORCHELASTIC_ERROR_FILE (a path per rank and launch), which every header diff of two
    ranks or two launches showed as a difference."""
    from tracediff.record.session import numeric_settings

    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", "/tmp/torchelastic_x/attempt_0/1/error.json")
    monkeypatch.setenv("TORCHINDUCTOR_FREEZING", "1")
    env = numeric_settings()["env"]
    assert "TORCHELASTIC_ERROR_FILE" not in env and env["TORCHINDUCTOR_FREEZING"] == "1"


def _record(tmp_path: Path, *script_args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracediff.cli", "record", "--nproc-per-node", "2", "--backend",
                           "eager", "-o", str(tmp_path / "t.jsonl"), "--timeout", "240",
                           str(FIXTURES / "ddp_step.py"), "--", *script_args],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.mark.slow
def test_record_launches_the_ranks_itself(tmp_path: Path) -> None:
    done = _record(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"wrote {tmp_path / 't.rank0.jsonl'}, {tmp_path / 't.rank1.jsonl'}" in done.stderr
    for rank in (0, 1):
        trace = Trace(tmp_path / f"t.rank{rank}.jsonl")
        assert (trace.header["rank"], trace.header["world_size"]) == (rank, 2) and not trace.truncated
        assert read_footer(trace.path)["process_group"] == {"backend": "gloo", "size": 2}


@pytest.mark.slow
def test_a_rank_that_crashes_fails_the_run_naming_it_and_how_far_each_rank_got(tmp_path: Path) -> None:
    done = _record(tmp_path, "--crash-rank", "1")
    assert done.returncode == 3, done.stderr[-3000:]
    failure = done.stderr.strip().splitlines()[-1]
    assert "rank 1: the script raised RuntimeError: rank 1 fails on purpose" in failure, failure
    assert "rank 0: " in failure and "rank 1: " in failure and "records" in failure
    assert read_footer(tmp_path / "t.rank1.jsonl")["error"]["type"] == "RuntimeError"


@pytest.mark.slow
def test_a_rank_that_hangs_fails_the_run_at_the_timeout_and_leaves_no_process(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tracediff.cli", "record", "--nproc-per-node", "2", "--backend",
                           "eager", "-o", str(tmp_path / "t.jsonl"), "--timeout", "25",
                           str(FIXTURES / "ddp_step.py"), "--", "--hang-rank", "1"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 3, done.stderr[-3000:]
    failure = done.stderr.strip().splitlines()[-1]
    assert "timed out after" in failure and "rank 0: " in failure and "rank 1: " in failure, failure
    left = _processes_mentioning(str(tmp_path))
    assert not left, f"processes left behind: {left}"


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain `text` (Linux: /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            found.append(command)
    return found


@pytest.mark.slow
def test_a_distributed_run_stopped_by_kill_leaves_no_process(tmp_path: Path) -> None:
    """`kill` (a cancelled CI job) stops a run as Ctrl-C does (one path: SIGTERM raises KeyboardInterrupt):
    the launcher and both ranks go, the partial traces stay. Before, the launcher and both ranks were left
    running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tracediff.cli", "run", "--nproc-per-node", "2", "--backends", "eager,aot_eager",
         "--out-dir", str(tmp_path / "run"), str(FIXTURES / "ddp_step.py"), "--", "--hang-rank", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "run").glob("a-eager.rank1.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(3)  # the ranks are under way (rank 1 asleep, rank 0 waiting for it)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=90)
    finally:
        process.kill()
    assert process.returncode == 130, stderr[-3000:]
    assert "interrupted; the traces recorded so far are in" in stderr
    assert not _processes_mentioning(str(tmp_path)), "processes left behind"
