"""Jobs on several nodes: `tracediff record/run --nnodes 2 --node-rank N --rdzv-endpoint HOST:PORT` on each
node (torch's launcher, one agent per "node", here two on one host), ranks an outside launcher started
(srun: RANK, WORLD_SIZE, MASTER_ADDR set), and `tracediff diff` of every node's traces together.
CPU, gloo, `fixtures/ddp_step.py`, eager and aot_eager."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, invoke, marker_line
from tracediff.launch.nodes import DEFAULT_RDZV_BACKEND, DEFAULT_RDZV_ID, nodes_of
from tracediff.launch.rank_notes import read_notes, write_note
from tracediff.launch.recording import Recording
from tracediff.trace.reader import Trace

DDP = "ddp_step.py"
SCRIPT = str(FIXTURES / DDP)


def _free_port() -> int:
    """A port no process listens on now: the kernel's pick for port 0 (tests run in parallel)."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return int(probe.getsockname()[1])


def _env(**more: str) -> dict[str, str]:
    launched = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in launched and not k.startswith("TORCHELASTIC_")}
    return dict(env, OMP_NUM_THREADS="1", **more)


def _start(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tracediff.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env=env or _env())


def _finish(processes: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    """Each process's exit code, stdout and stderr; none is left running."""
    done = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=400)
            done.append((process.returncode, out, err))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    return done


def _on_two_nodes(cwd: Path, command: str, *args: str, script_args: tuple[str, ...] = (),
                  rdzv: tuple[str, ...] = ()) -> list[tuple[int, str, str]]:
    """`tracediff COMMAND` as two nodes of one job, started together: --nnodes 2, one rank per node."""
    endpoint = f"localhost:{_free_port()}"
    nodes = [_start(cwd, command, SCRIPT, *args, "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                    "--rdzv-endpoint", endpoint, *rdzv, "--timeout", "300", "--", *script_args) for node in (0, 1)]
    return _finish(nodes)


def _diff(*traces: Path | str) -> tuple[int, dict[str, Any], str]:
    done = invoke("diff", *map(str, traces), "--format", "json")
    return done.exit_code, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: the job on one node, `--nproc-per-node 2` (t.rank0.jsonl, t.rank1.jsonl)."""
    where = tmp_path_factory.mktemp("one_node")
    (code, _, err), = _finish([_start(where, "record", SCRIPT, "--backend", "eager", "--nproc-per-node", "2",
                                      "-o", str(where / "t.jsonl"), "--timeout", "300")])
    assert code == 0, err[-3000:]
    return where


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, str, str]]]:
    """The same job on two nodes (c10d's rendezvous, which numbers the nodes itself), both writing into one
    shared directory."""
    where = tmp_path_factory.mktemp("two_nodes")
    done = _on_two_nodes(where, "record", "--backend", "eager", "-o", str(where / "t.jsonl"),
                         rdzv=("--rdzv-backend", "c10d", "--rdzv-id", "job1"))
    for code, _, err in done:
        assert code == 0, err[-3000:]
    return where, done


@pytest.fixture(scope="module")
def run_on_two_nodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, str, str]]]:
    """`tracediff run` eager against aot_eager on two nodes sharing --out-dir (the static rendezvous: node N
    runs rank N), compiled code 1% off on global rank 1, the second node's only rank."""
    where = tmp_path_factory.mktemp("run_two_nodes")
    done = _on_two_nodes(where, "run", "--backends", "eager,aot_eager", "--out-dir", str(where / "run"),
                         "--format", "json", script_args=("--fault-rank", "1"))
    return where / "run", done


def _stated_ranks(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if " ran rank(s) " in line)


@pytest.mark.slow
def test_two_nodes_record_the_traces_one_node_records(one_node: Path, two_nodes: tuple) -> None:
    where, done = two_nodes
    stated = sorted(_stated_ranks(err) for _, _, err in done)
    # Each node names the global rank it ran, whichever c10d gave it: between them, 0 and 1 of 2.
    assert [line.split(" ran rank(s) ")[0] for line in stated] == ["tracediff: node 0", "tracediff: node 1"]
    assert sorted(line.split(" ran rank(s) ")[1].split(";")[0] for line in stated) == ["0 of 2", "1 of 2"], stated
    for rank in (0, 1):
        header = Trace(where / f"t.rank{rank}.jsonl").header
        assert (header["rank"], header["world_size"]) == (rank, 2)
    assert {p.name for p in where.glob("t.node*.log")} == {"t.node0.log", "t.node1.log"}
    code, report, err = _diff(one_node / "t.jsonl", where / "t.jsonl")
    assert code == 0 and report["verdict"] == "match", err[-3000:]
    assert [(r["rank"], r["verdict"]) for r in report["ranks"]] == [(0, "match"), (1, "match")]
    assert all(c["in_sync"] and c["replicated_values"] > 20 for c in report["replicas"])


@pytest.mark.slow
def test_one_nodes_traces_alone_are_not_the_job(two_nodes: tuple, tmp_path: Path) -> None:
    where, _ = two_nodes
    for rank, missing in ((0, "rank(s) 1 of 2 are missing"), (1, "rank(s) 0 are missing")):
        alone = tmp_path / f"only{rank}"
        alone.mkdir()
        shutil.copy(where / f"t.rank{rank}.jsonl", alone)
        code, _, err = _diff(alone / "t.jsonl", where / "t.jsonl")
        assert code == 2 and missing in err and "gather every node's traces" in err, err
        assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_fault_on_the_second_node_is_named_by_its_global_rank(run_on_two_nodes: tuple) -> None:
    run, done = run_on_two_nodes
    (code_0, out_0, err_0), (code_1, out_1, err_1) = done
    assert code_1 == 1 and code_0 == 1, (err_0[-2000:], err_1[-2000:])
    line = marker_line(DDP, "planted fault line")
    second = json.loads(out_1)
    first = second["first_divergence"]
    # The second node's only rank is local rank 0; the report names its global rank.
    assert (first["rank"], first["op"], first["source"], first["entered"]) == (
        1, "aten::mul.Tensor", f"{DDP}:{line}", "local")
    assert [(r["rank"], r["verdict"]) for r in second["ranks"]] == [(1, "diverged")]
    assert second["traces"][0].endswith("a-eager.rank1.jsonl")
    assert f"tracediff diff {run / 'a-eager.jsonl'} {run / 'b-aot_eager.jsonl'}" in second["notes"][0]
    text = (run / "report.node1.txt").read_text()
    assert "first divergence (output) on rank 1: aten::mul.Tensor" in text
    assert f"rank 1: diverged at aten::mul.Tensor ({DDP}:{line}), made on this rank" in text
    assert json.loads((run / "report.node1.json").read_text()) == second
    # The first node compared its rank 0 alone: the difference came in by DDP's all-reduce.
    node_0 = json.loads(out_0)
    assert [(r["rank"], r["first_divergence"]["op"], r["first_divergence"]["entered"]) for r in node_0["ranks"]] == [
        (0, "c10d::allreduce_", "collective")]
    assert {p.name for p in run.glob("*.log")} == {f"{s}.node{n}.log" for s in ("a-eager", "b-aot_eager")
                                                   for n in (0, 1)}


@pytest.mark.slow
def test_the_whole_job_is_compared_from_the_nodes_shared_directory(run_on_two_nodes: tuple) -> None:
    run, _ = run_on_two_nodes
    code, report, err = _diff(run / "a-eager.jsonl", run / "b-aot_eager.jsonl")
    assert code == 1, err[-3000:]
    first = report["first_divergence"]
    assert (first["rank"], first["op"], first["entered"]) == (1, "aten::mul.Tensor", "local")
    assert [(r["rank"], r["first_divergence"]["entered"]) for r in report["ranks"]] == [
        (0, "collective"), (1, "local")]
    text = invoke("diff", str(run / "a-eager.jsonl"), str(run / "b-aot_eager.jsonl")).stdout
    assert "first divergence (output) on rank 1: aten::mul.Tensor" in text
    assert "the difference was made on rank 1 (locally)" in text


@pytest.fixture(scope="module")
def launched_outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ranks a cluster launcher started (as srun would: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT set), each running `tracediff record ... -o t.jsonl`."""
    where = tmp_path_factory.mktemp("srun")
    port = str(_free_port())
    ranks = [_start(where, "record", SCRIPT, "--backend", "eager", "-o", str(where / "t.jsonl"), "--timeout", "300",
                    env=_env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="localhost",
                             MASTER_PORT=port)) for rank in (0, 1)]
    for rank, (code, _, err) in enumerate(_finish(ranks)):
        assert code == 0, err[-3000:]
        assert f"wrote {where / f't.rank{rank}.jsonl'}" in err
    return where


@pytest.mark.slow
def test_ranks_an_outside_launcher_started_each_write_their_own_trace(launched_outside: Path, one_node: Path) -> None:
    for rank in (0, 1):
        trace = Trace(launched_outside / f"t.rank{rank}.jsonl")
        assert (trace.header["rank"], trace.header["world_size"]) == (rank, 2) and not trace.truncated
        assert (launched_outside / f"t.rank{rank}.log").is_file()
    assert not (launched_outside / "t.jsonl").exists()
    code, report, err = _diff(one_node / "t.jsonl", launched_outside / "t.jsonl")
    assert code == 0 and [r["verdict"] for r in report["ranks"]] == ["match", "match"], err[-3000:]


def test_record_inside_a_launched_rank_launches_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The parent tracediff inherits RANK and WORLD_SIZE: its child records in place, never under another
    torchrun."""
    from tracediff.config import load_config
    from tracediff.run import pipeline

    seen: list[tuple[Recording, Path]] = []
    monkeypatch.setattr(pipeline, "record_in_subprocess",
                        lambda script, args, recording, trace, echo: seen.append((recording, trace)))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    pipeline.record_script(SCRIPT, [], "eager", load_config(None), tmp_path / "t.jsonl", False, print)
    (recording, trace), = seen
    assert trace == tmp_path / "t.rank3.jsonl" and not recording.launched


@pytest.mark.parametrize(("args", "message"), [
    (("--nnodes", "2"), "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    (("--nnodes", "2", "--rdzv-endpoint", "node0:29400"), "--nnodes 2 needs --node-rank"),
    (("--node-rank", "1"), "--node-rank is for a job on several nodes: give --nnodes too"),
    (("--rdzv-endpoint", "node0:29400"), "--rdzv-endpoint is for a job on several nodes"),
    (("--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "node0:29400"), "--node-rank 2 is out of range"),
    (("--nnodes", "two", "--node-rank", "0", "--rdzv-endpoint", "node0:29400"), "--nnodes takes a number"),
    (("--nnodes", "1:4", "--node-rank", "0", "--rdzv-endpoint", "node0:29400"), "needs --rdzv-backend c10d"),
    (("--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "node0:99999"), "--rdzv-endpoint takes HOST:PORT"),
    (("--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "node0"), "the static rendezvous needs a port"),
])
@pytest.mark.parametrize("command", ["record", "run"])
def test_bad_node_options_are_one_line_errors(command: str, args: tuple[str, ...], message: str) -> None:
    done = invoke(command, SCRIPT, *args)
    assert done.exit_code == 2 and message in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("tracediff: error: ")


@pytest.mark.parametrize(("args", "message"), [
    (("--repeat", "2"), "--nnodes runs each backend once"),
    (("--light",), "--light does not combine with --nnodes"),
])
def test_run_on_nodes_refuses_what_it_cannot_do_there(args: tuple[str, ...], message: str) -> None:
    done = invoke("run", SCRIPT, "--backends", "eager,aot_eager", "--nnodes", "2", "--node-rank", "0",
                  "--rdzv-endpoint", "localhost:1", *args)
    assert done.exit_code == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize(("command", "args", "message"), [
    ("record", ("--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "localhost:1"),
     "--nnodes launches the ranks itself: run it outside torchrun or srun (this process is rank 1 of 2)"),
    ("run", ("--backends", "eager,aot_eager"), "tracediff run does not run inside a rank an outside launcher"),
])
def test_inside_a_launched_rank_launching_is_refused(monkeypatch: pytest.MonkeyPatch, command: str,
                                                     args: tuple[str, ...], message: str) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    done = invoke(command, SCRIPT, *args)
    assert done.exit_code == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_torchrun_takes_the_options_tracediff_passes() -> None:
    """Pins torch.distributed.run's option names and defaults that launch/nodes.py relies on."""
    from torch.distributed.run import get_args_parser

    nodes = nodes_of("2", 1, "node0:29400", "c10d", "job7")
    assert nodes is not None
    args = get_args_parser().parse_args([*nodes.torchrun_args(), "--nproc-per-node", "2", "-m", "tracediff.child"])
    assert (args.nnodes, args.node_rank, args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == (
        "2", 1, "c10d", "node0:29400", "job7")
    assert (args.nproc_per_node, args.module, args.standalone) == ("2", True, False)
    defaults = get_args_parser().parse_args(["script.py"])
    assert (defaults.rdzv_backend, defaults.rdzv_id) == (DEFAULT_RDZV_BACKEND, DEFAULT_RDZV_ID)
    assert get_args_parser().parse_args(["--standalone", "script.py"]).standalone
    assert nodes.for_launch("a").rdzv_id == "job7-a" != nodes.for_launch("b").rdzv_id


def test_a_recording_on_nodes_comes_back_as_it_went() -> None:
    recording = Recording("eager", nproc=2, nodes=nodes_of("1:4", 0, "h:29400", "c10d", "x"))
    assert Recording.from_json(recording.to_json()) == recording and recording.launched
    assert not Recording("eager").launched


def test_a_node_knows_its_ranks_from_their_notes(tmp_path: Path) -> None:
    """c10d gave this node global ranks 2 and 3 of 4; a note per rank says so, whatever --node-rank says."""
    from tracediff.launch.launcher import node_ranks

    for local in (0, 1):
        write_note(tmp_path, tmp_path / f"t.rank{2 + local}.jsonl",
                   {"LOCAL_RANK": str(local), "RANK": str(2 + local), "WORLD_SIZE": "4"})
    c10d = Recording("eager", nproc=2, nodes=nodes_of("2", 0, "h:29400", "c10d", None))
    found = node_ranks(read_notes(tmp_path), c10d, tmp_path / "t.jsonl")
    assert (found.ranks, found.world_size, found.unknown_locals) == ((2, 3), 4, ())
    assert found.traces == (tmp_path / "t.rank2.jsonl", tmp_path / "t.rank3.jsonl")
    # A rank that died before its note: named where the numbering is known (static: node 1 of 2, ranks 2, 3).
    (tmp_path / "local1.json").unlink()
    static = Recording("eager", nproc=2, nodes=nodes_of("2", 1, "h:29400", None, None))
    found = node_ranks(read_notes(tmp_path), static, tmp_path / "t.jsonl")
    assert (found.ranks, found.traces[1], found.unknown_locals) == ((2, 3), tmp_path / "t.rank3.jsonl", ())
    found = node_ranks(read_notes(tmp_path), c10d, tmp_path / "t.jsonl")
    assert (found.ranks, found.unknown_locals) == ((2,), (1,))


def test_one_nodes_replicas_are_compared_with_its_lowest_rank(tmp_path: Path) -> None:
    """Ranks 2 and 3 of 4 (one node's): a drift is between global ranks 2 and 3, never 'rank 0'."""
    from tests.test_distributed_diff import _program, _trace
    from tracediff.config import load_config
    from tracediff.diff.replicas import check_replicas

    for rank, nudge in ((2, False), (3, True)):
        _trace(tmp_path / f"t.rank{rank}.jsonl", rank, _program(rank, "rank", nudge=nudge))
    check = check_replicas([tmp_path / "t.rank2.jsonl", tmp_path / "t.rank3.jsonl"], load_config(None), ranks=(2, 3))
    drift = check.first
    assert drift is not None and (drift.base, drift.rank, drift.on_rank) == (2, 3, 3)
    assert "only rank 3 ran it" in drift.why and check.to_json()["ranks"] == [2, 3]
    assert check.to_json()["drifts"][0]["ranks"] == [2, 3]


def test_a_rank_of_this_node_that_raised_is_named_by_its_global_rank(tmp_path: Path) -> None:
    from tracediff.launch.launcher import NodeRanks, _ranks_result

    for rank, error in ((2, None), (3, {"type": "RuntimeError", "message": "rank 3 fails"})):
        footer = {"t": "footer", "complete": True, "records": 0, "ended": 1.0, "error": error}
        header = {"t": "header", "schema": 2, "rank": rank, "world_size": 4, "backend": "eager"}
        (tmp_path / f"t.rank{rank}.jsonl").write_text(f"{json.dumps(header)}\n{json.dumps(footer)}\n")
    (tmp_path / "t.node1.log").write_text("")
    node = NodeRanks((2, 3), (tmp_path / "t.rank2.jsonl", tmp_path / "t.rank3.jsonl"), 4)
    result = _ranks_result("eager", tmp_path / "t.jsonl", tmp_path / "t.node1.log", 1, False, 1.0, node)
    assert result.failed_rank == 3 and result.rank_trace(3) == tmp_path / "t.rank3.jsonl"
    failure = result.failure() or ""
    assert "rank 3: the script raised RuntimeError: rank 3 fails" in failure, failure
    assert "rank 2: 0 records, finished" in failure and "rank 3: 0 records, raised" in failure


def test_a_node_given_other_ranks_for_a_and_b_says_what_to_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """c10d may number the nodes differently for the two launches of `run` (on one host: by pid)."""
    from tracediff.config import load_config
    from tracediff.errors import UserError
    from tracediff.outcome import RunResult
    from tracediff.outputs import RunDir
    from tracediff.run import recording
    from tracediff.run.ranks import run_ranks

    def recorded(backend: str, rank: int) -> RunResult:
        trace = tmp_path / f"{'a' if backend == 'eager' else 'b'}-{backend}.jsonl"
        return RunResult(backend, trace, tmp_path / "x.log", 0, False, 1.0,
                         rank_traces=(tmp_path / f"{trace.stem}.rank{rank}.jsonl",), ranks=(rank,), world_size=2)

    runs = iter([recorded("eager", 1), recorded("aot_eager", 0)])
    monkeypatch.setattr(recording, "record_run", lambda *args, **kwargs: next(runs))
    nodes = nodes_of("2", 0, "localhost:1", "c10d", None)
    with pytest.raises(UserError, match=r"ran rank\(s\) 1 under eager and 0 under aot_eager") as raised:
        run_ranks(Path(SCRIPT), [], ["eager", "aot_eager"], load_config(None), RunDir(tmp_path), 1, print,
                  nodes=nodes)
    assert f"tracediff diff {tmp_path / 'a-eager.jsonl'} {tmp_path / 'b-aot_eager.jsonl'}" in str(raised.value)
