"""Distributed runs compared: rank by rank between backends, and replicas across the ranks of one run
(`tracediff run --nproc-per-node 2`, `tracediff diff` of per-rank traces). CPU, gloo, 2 processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, marker_line
from tracediff.config import load_config
from tracediff.diff.replicas import check_replicas
from tracediff.errors import UserError
from tracediff.outcome import Outcome
from tracediff.outputs import rank_set

DDP = "ddp_step.py"


def _tracediff(cwd: Path, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    command, dashes, script_args = list(args), ["--"] if "--" in args else [], []
    if dashes:
        command, script_args = command[:command.index("--")], command[command.index("--") + 1:]
    done = subprocess.run([sys.executable, "-m", "tracediff.cli", *command, "--format", "json", *dashes, *script_args],
                          capture_output=True,
                          text=True, timeout=600, cwd=cwd, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = None
    return done.returncode, report, done.stderr


def _run(tmp_path: Path, backends: str, *script_args: str) -> tuple[int, dict[str, Any] | None, str]:
    return _tracediff(tmp_path, "run", str(FIXTURES / DDP), "--backends", backends, "--nproc-per-node", "2",
                      "--out-dir", str(tmp_path / "run"), "--timeout", "300", "--", *script_args)


@pytest.fixture(scope="module")
def fault_on_rank_1(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, dict[str, Any] | None, str]:
    """One run of eager against aot_eager on 2 ranks, compiled code 1% off on rank 1 only."""
    where = tmp_path_factory.mktemp("fault")
    return (where, *_run(where, "eager,aot_eager", "--fault-rank", "1"))


@pytest.mark.slow
def test_a_fault_on_one_rank_is_named_with_its_rank_op_and_line(fault_on_rank_1: tuple) -> None:
    _, code, report, stderr = fault_on_rank_1
    assert code == 1 and report is not None, stderr[-3000:]
    first = report["first_divergence"]
    assert (first["rank"], first["op"], first["source"], first["entered"], first["pinned_by"]) == (
        1, "aten::mul.Tensor", f"{DDP}:{marker_line(DDP, 'planted fault line')}", "local", "value")
    assert report["traces"][0].endswith("a-eager.rank1.jsonl")
    by_rank = {r["rank"]: r for r in report["ranks"]}
    assert by_rank[1]["verdict"] == by_rank[0]["verdict"] == "diverged"
    # Rank 0 computed nothing wrong: DDP's all-reduce of the gradients brought rank 1's difference in.
    assert by_rank[0]["first_divergence"]["op"] == "c10d::allreduce_"
    assert by_rank[0]["first_divergence"]["entered"] == "collective"
    # Within each run the ranks stay in sync: the fault is the same on both of rank 1's replicas' inputs.
    assert [(c["backend"], c["in_sync"]) for c in report["replicas"]] == [("eager", True), ("aot_eager", True)]
    assert all(c["replicated_values"] > 20 for c in report["replicas"])
    assert Outcome.from_json(report).to_json() == report


@pytest.mark.slow
def test_diff_pairs_two_distributed_recordings_rank_by_rank(fault_on_rank_1: tuple) -> None:
    where, _, report, _ = fault_on_rank_1
    run = where / "run"
    code, diffed, stderr = _tracediff(where, "diff", str(run / "a-eager.jsonl"), str(run / "b-aot_eager.jsonl"))
    assert code == 1 and diffed is not None, stderr[-3000:]
    assert diffed["first_divergence"]["rank"] == 1
    assert diffed["first_divergence"]["source"] == report["first_divergence"]["source"]
    assert [r["verdict"] for r in diffed["ranks"]] == ["diverged", "diverged"]
    code, _, stderr = _tracediff(where, "diff", str(run / "a-eager.jsonl"), str(run / "b-aot_eager.rank0.jsonl"))
    assert code == 2 and "one trace per rank" in stderr


@pytest.mark.slow
def test_the_clean_script_matches_on_every_rank_and_stays_in_sync(tmp_path: Path) -> None:
    code, report, stderr = _run(tmp_path, "eager,aot_eager")
    assert code == 0 and report is not None, stderr[-3000:]
    assert report["verdict"] == "match" and report["first_divergence"] is None
    assert [(r["rank"], r["verdict"]) for r in report["ranks"]] == [(0, "match"), (1, "match")]
    assert all(c["in_sync"] for c in report["replicas"])


@pytest.mark.slow
def test_a_replica_that_drifts_is_named_by_one_backend_on_its_ranks(tmp_path: Path) -> None:
    """`tracediff run --backends eager --nproc-per-node 2`: do my ranks stay in sync?"""
    code, report, stderr = _run(tmp_path, "eager", "--drift-rank", "1")
    assert code == 1 and report is not None, stderr[-3000:]
    first = report["first_divergence"]
    assert (first["rank"], first["source"]) == (1, f"{DDP}:{marker_line(DDP, 'planted drift line')}")
    drift, = report["replicas"][0]["drifts"]
    assert (drift["on_rank"], drift["how"]) == (1, "alone") and "only rank 1 ran it" in drift["why"]
    assert len(report["traces"]) == 2 and "ranks" not in report


@pytest.mark.slow
def test_a_rank_that_crashes_fails_the_distributed_run(tmp_path: Path) -> None:
    code, report, stderr = _run(tmp_path, "eager,aot_eager", "--crash-rank", "1")
    assert code == 3 and report is not None, stderr[-3000:]
    assert report["verdict"] == "failed"
    assert any("rank 1: the script raised RuntimeError" in (r.get("failure") or "") for r in report["runs"])


def _trace(path: Path, rank: int, records: list[dict[str, Any]]) -> None:
    header = {"t": "header", "schema": 2, "rank": rank, "world_size": 2, "backend": "eager"}
    lines = [header, *({"t": "op", **r, "i": i} for i, r in enumerate(records)), {"t": "footer", "complete": True}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _t(id_: int, v: int, value: float, **more: Any) -> dict[str, Any]:
    fp = {"sum": value * 4, "l1": abs(value) * 4, "l2": abs(value) * 2, "max": abs(value), "nan": 0, "inf": 0, "n": 4}
    return {"a": "self", "id": id_, "v": v, "dt": "float32", "sh": [4], "dev": "cpu", "fp": fp, **more}


def _program(rank: int, shard_arg: str, nudge: bool = False) -> list[dict[str, Any]]:
    """All-reduce a tensor (replicated after), add one to it, then select a shard by rank's argument."""
    records = [
        {"op": "aten::ones", "in": [], "out": [_t(0, 0, 1.0 + rank)], "sa": "a"},
        {"op": "c10d::allreduce_", "in": [_t(0, 0, 1.0 + rank)], "out": [dict(_t(0, 1, 0.0), fp=None, unread=True)],
         "sa": "b", "gs": 2},
        {"op": "aten::add.Tensor", "in": [_t(0, 1, 3.0)], "out": [_t(1, 0, 4.0)], "sa": "c", "src": "p.py:3"},
    ]
    if nudge:
        records.append({"op": "aten::add_.Tensor", "in": [_t(1, 0, 4.0)], "out": [_t(1, 1, 4.5)], "sa": "d",
                        "src": "p.py:4"})
    records.append({"op": "aten::select.int", "in": [_t(1, 1 if nudge else 0, 4.5 if nudge else 4.0)],
                    "out": [_t(2, 0, 4.0 + rank)], "sa": shard_arg, "src": "p.py:5"})
    return records


def test_an_op_given_other_arguments_on_each_rank_is_no_drift(tmp_path: Path) -> None:
    """`x[rank]` of a replicated x differs by design: its arguments differ (the record's digest `sa`)."""
    _trace(tmp_path / "t.rank0.jsonl", 0, _program(0, "rank0"))
    _trace(tmp_path / "t.rank1.jsonl", 1, _program(1, "rank1"))
    check = check_replicas(rank_set(tmp_path / "t.jsonl") or [], load_config(None))
    assert check.first is None and check.replicated_values >= 2


def test_the_same_arguments_on_replicated_inputs_must_give_the_same_result(tmp_path: Path) -> None:
    _trace(tmp_path / "t.rank0.jsonl", 0, _program(0, "same"))
    _trace(tmp_path / "t.rank1.jsonl", 1, _program(1, "same"))
    drift = check_replicas(rank_set(tmp_path / "t.jsonl") or [], load_config(None)).first
    assert drift is not None and (drift.site.op, drift.site.source, drift.on_rank, drift.how) == (
        "aten::select.int", "p.py:5", 0, "computed")


def test_an_op_only_one_rank_ran_on_a_replicated_value_is_named(tmp_path: Path) -> None:
    _trace(tmp_path / "t.rank0.jsonl", 0, _program(0, "rank0"))
    _trace(tmp_path / "t.rank1.jsonl", 1, _program(1, "rank1", nudge=True))
    drift = check_replicas(rank_set(tmp_path / "t.jsonl") or [], load_config(None)).first
    assert drift is not None and (drift.site.source, drift.on_rank) == ("p.py:4", 1)
    assert "only rank 1 ran it" in drift.why


def test_a_set_of_per_rank_traces_is_found_by_its_name_or_directory(tmp_path: Path) -> None:
    for rank in (0, 1):
        (tmp_path / f"t.rank{rank}.jsonl").write_text("")
    expected = [tmp_path / "t.rank0.jsonl", tmp_path / "t.rank1.jsonl"]
    assert rank_set(tmp_path / "t.jsonl") == expected == rank_set(tmp_path)
    assert rank_set(tmp_path / "t.rank0.jsonl") is None  # one trace
    (tmp_path / "u.rank1.jsonl").write_text("")
    with pytest.raises(UserError, match="several sets"):
        rank_set(tmp_path)
    with pytest.raises(UserError, match=r"rank\(s\) 0 are missing"):
        rank_set(tmp_path / "u.jsonl")


def _run_fixture(tmp_path: Path, fixture: str, backends: str, *script_args: str) -> tuple[int, dict | None, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = Path(fixture) if "/" in fixture else FIXTURES / fixture
    return _tracediff(tmp_path, "run", str(script), "--backends", backends, "--nproc-per-node", "2",
                      "--out-dir", str(tmp_path / "run"), "--timeout", "500", "--", *script_args)


@pytest.mark.slow
def test_a_fault_in_a_tensor_parallel_dtensor_model_is_named_on_its_rank(tmp_path: Path) -> None:
    """DTensor: column- then row-parallel linears, the second all-reduced (a functional collective the
    trace records, DTensors described by their local shards)."""
    code, report, stderr = _run_fixture(tmp_path, "tp_mlp.py", "eager,aot_eager", "--fault-rank", "1")
    assert code == 1 and report is not None, stderr[-3000:]
    first = report["first_divergence"]
    assert (first["rank"], first["op"], first["source"], first["entered"]) == (
        1, "aten::mul.Tensor", f"tp_mlp.py:{marker_line('tp_mlp.py', 'planted fault line')}", "local")
    assert report["ranks"][0]["first_divergence"]["entered"] == "collective"
    assert all(c["in_sync"] for c in report["replicas"])  # the all-reduce gives both ranks the same output
    trace = [json.loads(line) for line in Path(report["traces"][0]).read_text().splitlines()]
    reduced = [r for r in trace if r.get("op") == "_c10d_functional::all_reduce"]
    assert reduced and reduced[0]["in"][0]["fp"] is not None and reduced[0]["gs"] == 2


def _two_gpus() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() >= 2


@pytest.mark.cuda
@pytest.mark.skipif(not _two_gpus(), reason="needs 2 CUDA GPUs (NCCL)")
@pytest.mark.parametrize("fixture", ["ddp_step.py", "tp_mlp.py", "fsdp2_mlp.py"])
def test_on_two_gpus_with_nccl_under_inductor_a_fault_is_named_and_the_clean_run_matches(
        tmp_path: Path, fixture: str) -> None:
    clean = _run_fixture(tmp_path / "clean", fixture, "eager,inductor", "--device", "cuda")
    assert clean[0] == 0 and clean[1] is not None, clean[2][-3000:]
    assert [r["verdict"] for r in clean[1]["ranks"]] == ["match", "match"]
    assert all(c["in_sync"] for c in clean[1]["replicas"])
    code, report, stderr = _run_fixture(tmp_path / "fault", fixture, "eager,inductor", "--device", "cuda",
                                        "--fault-rank", "1")
    assert code == 1 and report is not None, stderr[-3000:]
    first = report["first_divergence"]
    assert (first["rank"], first["source"]) == (1, f"{fixture}:{marker_line(fixture, 'planted fault line')}")


@pytest.mark.cuda
@pytest.mark.skipif(not _two_gpus(), reason="needs 2 CUDA GPUs (NCCL)")
def test_on_two_gpus_a_clean_gpt2_ddp_run_matches_on_every_rank(tmp_path: Path) -> None:
    """Hugging Face GPT-2 (from a config) under DDP with AdamW, eager against inductor. Before: a false
    divergence at c10d::allreduce_ on every rank (DDP's gradient buckets in another order after a
    compiled backward, their views paired by position)."""
    pytest.importorskip("transformers")
    script = Path(__file__).resolve().parent.parent / "bench" / "distributed" / "gpt2_ddp.py"
    code, report, stderr = _run_fixture(tmp_path, str(script), "eager,inductor", "--device", "cuda")
    assert code == 0 and report is not None, stderr[-3000:]
    assert [r["verdict"] for r in report["ranks"]] == ["match", "match"]
    assert all(c["in_sync"] for c in report["replicas"])


@pytest.mark.cuda
@pytest.mark.skipif(not _two_gpus(), reason="needs 2 CUDA GPUs (NCCL)")
def test_on_two_gpus_a_replica_drift_under_inductor_is_named(tmp_path: Path) -> None:
    code, report, stderr = _run_fixture(tmp_path, DDP, "inductor", "--device", "cuda", "--drift-rank", "1")
    assert code == 1 and report is not None, stderr[-3000:]
    assert (report["first_divergence"]["rank"], report["first_divergence"]["source"]) == (
        1, f"{DDP}:{marker_line(DDP, 'planted drift line')}")


def test_collectives_anchor_the_alignment_in_order(tmp_path: Path) -> None:
    """The n-th all-reduce of A pairs with the n-th of B (their outputs are unread: no value to pair on):
    by op and shape alone, where B ran one more, A's would pair with B's last."""
    from tracediff.diff.align import align
    from tracediff.diff.skeleton import build_skeleton

    def reduce_(id_: int) -> dict[str, Any]:
        return {"op": "c10d::allreduce_", "in": [_t(id_, 0, 1.0)], "out": [dict(_t(id_, 1, 0.0), fp=None, unread=True)],
                "src": "p.py:7"}

    extra = {"op": "aten::mul.Tensor", "in": [_t(9, 0, 2.0)], "out": [_t(10, 0, 4.0)], "src": "p.py:8"}
    _trace(tmp_path / "a.jsonl", 0, [reduce_(1), extra])
    _trace(tmp_path / "b.jsonl", 0, [reduce_(1), reduce_(2), extra])
    partner, _ = align(build_skeleton(tmp_path / "a.jsonl"), build_skeleton(tmp_path / "b.jsonl"))
    assert list(partner) == [0, 2]


def test_a_sharded_dtensor_is_no_replica(tmp_path: Path) -> None:
    """Each rank holds its own shard of a sharded DTensor (described by its local shard, `pl` "S"), though
    the op that made it read replicated values alike."""
    def program(rank: int) -> list[dict[str, Any]]:
        records = _program(rank, "same")[:3]  # all-reduced, then `add`: replicated
        shard = dict(_t(1, 0, 4.0 + rank), pl="S")
        records.append({"op": "aten::mul.Tensor", "in": [shard], "out": [dict(_t(3, 0, 8.0 + rank), pl="S")],
                        "sa": "e", "src": "p.py:6"})
        return records

    _trace(tmp_path / "t.rank0.jsonl", 0, program(0))
    _trace(tmp_path / "t.rank1.jsonl", 1, program(1))
    assert check_replicas(rank_set(tmp_path / "t.jsonl") or [], load_config(None)).first is None


def test_each_rank_taking_its_own_chunk_of_a_replicated_split_is_no_drift(tmp_path: Path) -> None:
    """gloo's reduce-scatter all-reduces, splits the result alike on every rank, and each rank copies its own
    chunk: both chunks are replicas, but rank 0 reads chunk 0 where rank 1 reads chunk 1."""
    def program(rank: int) -> list[dict[str, Any]]:
        records = _program(rank, "same")[:3]  # all-reduced, then `add`: replicated
        chunks = [dict(_t(3, 0, 1.0), a="0"), dict(_t(4, 0, 2.0), a="1")]
        records.append({"op": "aten::split.Tensor", "in": [_t(1, 0, 4.0)], "out": chunks, "sa": "f", "src": "p.py:6"})
        mine = dict(chunks[rank], a="src")
        records.append({"op": "aten::mul.Tensor", "in": [mine], "out": [_t(5, 0, 2.0 * (rank + 1))], "sa": "g",
                        "src": "p.py:7"})
        return records

    _trace(tmp_path / "t.rank0.jsonl", 0, program(0))
    _trace(tmp_path / "t.rank1.jsonl", 1, program(1))
    check = check_replicas(rank_set(tmp_path / "t.jsonl") or [], load_config(None))
    assert check.first is None and check.replicated_values >= 2


@pytest.mark.slow
def test_fsdp2_training_matches_when_clean_and_a_fault_is_named_on_its_rank(tmp_path: Path) -> None:
    """FSDP2 re-allocates each unsharded parameter outside the dispatcher before an all-gather writes it, and
    gloo's reduce-scatter hands each rank its chunk of an all-reduced buffer. Before: a false divergence at
    the all-gather on every rank, and a false replica drift at the chunks' `split`."""
    clean = _run_fixture(tmp_path / "clean", "fsdp2_mlp.py", "eager,aot_eager")
    assert clean[0] == 0 and clean[1] is not None, clean[2][-3000:]
    assert [r["verdict"] for r in clean[1]["ranks"]] == ["match", "match"]
    assert all(c["in_sync"] and c["replicated_values"] > 0 for c in clean[1]["replicas"])
    code, report, stderr = _run_fixture(tmp_path / "fault", "fsdp2_mlp.py", "eager,aot_eager", "--fault-rank", "1")
    assert code == 1 and report is not None, stderr[-3000:]
    first = report["first_divergence"]
    assert (first["rank"], first["op"], first["source"], first["entered"]) == (
        1, "aten::mul.Tensor", f"fsdp2_mlp.py:{marker_line('fsdp2_mlp.py', 'planted fault line')}", "local")
    assert report["ranks"][0]["first_divergence"]["entered"] == "collective"
