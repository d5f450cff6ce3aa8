"""Trace B's side of the walk in a second process (diff/verdict/remote_b_side.py), as long traces diff: the same
verdict, counts and answers as the walk's own, a failure there raised here, and no process left behind."""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tracediff.diff.verdict.walk as walk_module
from tracediff.config import Config
from tracediff.diff.engine import diff_traces
from tracediff.diff.skeleton import build_skeleton
from tracediff.diff.verdict.b_side import BSide
from tracediff.diff.verdict.divergence import DiffResult
from tracediff.diff.verdict.remote_b_side import RemoteBSide

# A healthy bf16 training run recorded eager and under inductor (tests/test_align_chain_ends.py): its kernels make
# the rules ask B's side who made values.
RECORDED = Path(__file__).parent / "data" / "gpt2_bf16_4_steps"
BENCH_SYNTH = Path(__file__).resolve().parents[1] / "bench" / "synth.py"


@pytest.fixture(scope="module")
def synthetic_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """bench/synth.py's pair at 12,000 records: scattered insertions and deletions, one planted divergence."""
    spec = importlib.util.spec_from_file_location("bench_synth", BENCH_SYNTH)
    assert spec is not None and spec.loader is not None
    synth = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synth)
    folder = tmp_path_factory.mktemp("synth")
    meta = synth.generate(folder, 12_000, edits=30)
    return folder / "a.jsonl", folder / "b.jsonl", meta


def _diff(a: Path, b: Path, monkeypatch: pytest.MonkeyPatch, remote: bool) -> DiffResult:
    monkeypatch.setattr(walk_module, "remote_b_side", lambda skeleton: remote)
    return diff_traces(a, b, Config())


def _summary(result: DiffResult) -> tuple:
    return (result.first, result.compared, result.inherited, result.inherited_complete, result.paired,
            result.unpaired_a, result.unpaired_b, result.structure, result.structure_count)


def _counting_asks(monkeypatch: pytest.MonkeyPatch) -> Counter:
    asked: Counter = Counter()
    ask: Callable[..., Any] = RemoteBSide._ask

    def counted(self: RemoteBSide, method: str, *args: Any) -> Any:
        asked[method] += 1
        return ask(self, method, *args)
    monkeypatch.setattr(RemoteBSide, "_ask", counted)
    return asked


def test_a_planted_divergence_is_found_alike_with_b_in_another_process(
        synthetic_pair: tuple[Path, Path, dict], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, meta = synthetic_pair
    local = _diff(a, b, monkeypatch, remote=False)
    remote = _diff(a, b, monkeypatch, remote=True)
    assert remote.first is not None and remote.first.a.index == meta["planted"]["index_a"]
    assert _summary(remote) == _summary(local)
    assert multiprocessing.active_children() == []  # B's process ended with the walk


def test_the_rules_questions_get_the_local_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = RECORDED / "eager.jsonl.zst", RECORDED / "inductor.jsonl.zst"
    local = _diff(a, b, monkeypatch, remote=False)
    asked = _counting_asks(monkeypatch)
    remote = _diff(a, b, monkeypatch, remote=True)
    assert asked["computing_producer"] > 0 and asked["walk_back"] > 0  # the premise: B's side was asked
    assert _summary(remote) == _summary(local)
    assert local.paired > 1000


def test_a_failure_in_bs_process_is_raised_in_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: BSide, t: Any) -> None:
        raise KeyError("a table lost")
    monkeypatch.setattr(BSide, "computing_producer", broken)  # before the fork: B's process inherits it
    with pytest.raises(RuntimeError, match="(?s)B's side of the walk failed.*a table lost"):
        _diff(RECORDED / "eager.jsonl.zst", RECORDED / "inductor.jsonl.zst", monkeypatch, remote=True)
    assert multiprocessing.active_children() == []


def test_a_call_that_failed_unasked_is_found_when_the_walk_ends(
        synthetic_pair: tuple[Path, Path, dict], monkeypatch: pytest.MonkeyPatch) -> None:
    """B's process makes the walk's calls without answering them: one that raised is told at the end."""
    a, b, _ = synthetic_pair

    def broken(self: BSide, *args: Any) -> None:
        raise ValueError("cannot stop")
    monkeypatch.setattr(BSide, "stop_filing", broken)
    with pytest.raises(RuntimeError, match="(?s)failed.*cannot stop"):
        _diff(a, b, monkeypatch, remote=True)
    assert multiprocessing.active_children() == []


def test_bs_process_dying_is_said_in_one_error(synthetic_pair: tuple[Path, Path, dict],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, _ = synthetic_pair
    agree = BSide.agree

    def dies(self: BSide, record: Any, a_index: int, loose_args: Any = ()) -> None:
        if a_index > 3_000:
            os._exit(3)  # only B's process agrees through its BSide: killed, say, by the OOM killer
        agree(self, record, a_index, loose_args)
    monkeypatch.setattr(BSide, "agree", dies)
    with pytest.raises(RuntimeError, match=r"B's side of the walk ended \(exit code 3\)"):
        _diff(a, b, monkeypatch, remote=True)
    assert multiprocessing.active_children() == []


def test_an_interrupted_walk_ends_bs_process(synthetic_pair: tuple[Path, Path, dict],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, _ = synthetic_pair
    visit = walk_module._Walker._visit

    def interrupted(self: Any, ra: Any, index: int) -> bool:
        if index == 5_000:
            raise KeyboardInterrupt
        return visit(self, ra, index)
    monkeypatch.setattr(walk_module._Walker, "_visit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _diff(a, b, monkeypatch, remote=True)
    assert multiprocessing.active_children() == []


def test_only_a_long_trace_b_gets_a_process(synthetic_pair: tuple[Path, Path, dict],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _, b, _ = synthetic_pair
    skeleton = build_skeleton(b)
    assert not walk_module.remote_b_side(skeleton)  # 12,000 records: 9 MB
    monkeypatch.setattr(walk_module, "REMOTE_B_SIDE_BYTES", 1 << 20)
    assert walk_module.remote_b_side(skeleton)
