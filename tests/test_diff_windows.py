"""Long traces diff in bounded memory: skeleton keys spilled to files, the alignment a window at a time.

The pair is bench/synth.py's (the diff-scale benchmark's traces, at 12,000 records): a training step of
a 12-layer model repeated, with scattered insertions and deletions and one planted value divergence.
The windows and the in-memory limit are shrunk so that a small pair crosses several of them.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest

import tracediff.diff.align as align_module
import tracediff.diff.engine as engine_module
import tracediff.diff.skeleton as skeleton_module
import tracediff.diff.verdict.walk as walk_module
from tests.conftest import invoke
from tests.synth import bench_synth
from tracediff.config import Config
from tracediff.diff.align import OP_TIER, VALUE_TIER, align, align_in_windows
from tracediff.diff.engine import diff_traces
from tracediff.diff.skeleton import KEY_COLUMNS, Skeleton, build_skeleton

RECORDS = 12_000


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    folder = tmp_path_factory.mktemp("synth")
    meta = bench_synth().generate(folder, RECORDS, edits=30)
    return folder / "a.jsonl", folder / "b.jsonl", meta


def test_spilled_keys_read_back_as_the_keys_kept_in_memory(pair: tuple[Path, Path, dict], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    a, _, _ = pair
    in_memory = build_skeleton(a)
    monkeypatch.setattr(skeleton_module, "IN_MEMORY_RECORDS", 3_000)
    monkeypatch.setattr(skeleton_module, "_SPILL_CHUNK", 777)
    spilled = build_skeleton(a, tmp_path / "keys")
    assert spilled.spilled == tmp_path / "keys" and in_memory.spilled is None
    assert len(spilled) == len(in_memory) > 10_000
    assert all(len(getattr(spilled, name)) == 0 for name in KEY_COLUMNS)  # none left in memory
    for lo, hi in ((0, 100), (2_990, 3_800), (len(in_memory) - 50, len(in_memory) + 10)):
        read, kept = spilled.window(lo, hi), in_memory.window(lo, hi)
        for name in KEY_COLUMNS:
            assert getattr(read, name) == getattr(kept, name), (name, lo, hi)
        assert read.is_region == in_memory.is_region[lo:hi] and len(read) == min(hi, len(in_memory)) - lo


def test_windows_pair_almost_every_record_as_one_piece_does(pair: tuple[Path, Path, dict]) -> None:
    a_path, b_path, _ = pair
    a, b = build_skeleton(a_path), build_skeleton(b_path)
    whole, whole_tier = align(a, b)
    windowed, windowed_tier = align_in_windows(a, b, window=2_500)
    assert len(windowed) == len(whole)
    pairs = {(i, j) for i, j in enumerate(whole) if j >= 0 and whole_tier[i] in (VALUE_TIER, OP_TIER)}
    windowed_pairs = {(i, j) for i, j in enumerate(windowed) if j >= 0}
    assert len(pairs - windowed_pairs) <= 0.001 * len(pairs), sorted(pairs - windowed_pairs)[:10]
    assert all(later > earlier for earlier, later in zip(
        [j for j in windowed if j >= 0], [j for j in windowed if j >= 0][1:])), "pairs must stay monotone"
    assert windowed_tier != bytearray(len(windowed))


def test_a_long_diff_finds_the_planted_record_through_spilled_keys_and_windows(
        pair: tuple[Path, Path, dict], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, meta = pair
    one_piece = diff_traces(a, b, Config())
    monkeypatch.setattr(skeleton_module, "IN_MEMORY_RECORDS", 3_000)
    monkeypatch.setattr("tracediff.diff.align.IN_MEMORY_RECORDS", 3_000)
    windowed = diff_traces(a, b, Config())
    for result in (one_piece, windowed):
        assert result.first is not None
        assert (result.first.a.index, result.first.a.op) == (meta["planted"]["index_a"], meta["planted"]["op"])
    assert windowed.first is not None and one_piece.first is not None
    found, expected = windowed.first, one_piece.first
    assert (found.rule, found.kind, found.inputs_agree, found.rel_diff) == (
        expected.rule, expected.kind, expected.inputs_agree, expected.rel_diff)


def test_traces_of_one_window_align_as_they_always_have(pair: tuple[Path, Path, dict]) -> None:
    a, b = build_skeleton(pair[0]), build_skeleton(pair[1])
    assert align_in_windows(a, b) == align(a, b)


def _keys_at_one_line(values: dict[int, int], length: int, lines: dict[int, int] | None = None) -> Skeleton:
    """A skeleton of `length` records at one source line (42, but for `lines`: position -> line); `values`:
    position -> coarse value key."""
    skeleton = Skeleton(Path("t.jsonl"), {"t": "header"})  # type: ignore[typeddict-item]
    for k in range(length):
        value = values.get(k, 0)
        for name, key in (("primary", 1), ("signature", 1), ("value", value), ("fine_value", value), ("named", 0),
                          ("coarse", value), ("coarse_shifted", value + 1000 if value else 0),
                          ("has_value", bool(value)),
                          ("source", (lines or {}).get(k, 42)), ("backward", 0)):
            getattr(skeleton, name).append(key)
        skeleton.is_region.append(0)
        skeleton.length += 1
    return skeleton


@pytest.mark.parametrize(("reach", "unpaired"), [(100, True), (3, False)])
def test_values_computed_in_another_order_are_looked_for_near_the_pair(
        monkeypatch: pytest.MonkeyPatch, reach: int, unpaired: bool) -> None:
    """A pair by op whose two values each occur at its line in the other trace is unpaired (DDP's buckets in
    another order), but only where they occur near it: a long run's line holds look-alikes by chance."""
    monkeypatch.setattr(align_module, "_REORDER_REACH", reach)
    a = _keys_at_one_line({0: 7, 5: 11}, 10)  # A's value at 5 is B's at 0, 5 records away
    b = _keys_at_one_line({0: 11, 5: 7}, 10)
    partner, tier = array("q", range(10)), bytearray([OP_TIER]) * 10
    align_module._unpair_reordered(partner, tier, a, b)
    assert (partner[5] == -1) == unpaired


@pytest.mark.parametrize("left_unpaired", [True, False])
def test_a_value_fused_at_another_line_counts_where_the_other_is_an_unpaired_record(left_unpaired: bool) -> None:
    """Regional compilation under bf16 (bench/real_programs/regional_compile.py): B casts one weight's gradient
    alone at the pair's line and fuses the cast of another, which A makes last, into a kernel placed at another
    line. B's value is an unpaired record of A's at the line, A's value is B's at another line: the pair is
    the same values in another order, unpaired. Where that record of A has a partner of its own, B's value
    standing there proves nothing (a wrong decomposition computing `sin` where A's line computes both)."""
    a = _keys_at_one_line({2: 11, 5: 7}, 10)
    b = _keys_at_one_line({5: 11, 8: 7}, 10, lines={8: 43})
    partner, tier = array("q", range(10)), bytearray([OP_TIER]) * 10
    if left_unpaired:
        partner[2], tier[2] = -1, 0
    align_module._unpair_reordered(partner, tier, a, b)
    assert (partner[5] == -1) == left_unpaired


@pytest.mark.parametrize(("b_value", "unpaired"), [(11, True), (0, False)])
def test_a_value_that_is_exactly_an_unpaired_record_of_a_counts_unless_it_is_zeros(b_value: int,
                                                                                     unpaired: bool) -> None:
    """A compiled GRU backward (bench/real_programs/gru_unrolled.py on CUDA) makes the last step's weight gradient
    alone, which eager made first; eager's last one is the first step's, zeros (its hidden state was 0), which B
    never makes. B's value is exactly an unpaired record of A's near the pair: unpaired. Not where B's value is
    zeros, which a fault makes too."""
    a = _keys_at_one_line({2: 11, 5: 7}, 10)
    b = _keys_at_one_line({5: 11}, 10)
    if b_value == 0:  # zeros: their two coarse keys are one (skeleton.py `_coarse`)
        a.value[2] = a.coarse[2] = b.value[5] = b.coarse[5] = 13
        a.coarse_shifted[2] = b.coarse_shifted[5] = 13
    partner, tier = array("q", range(10)), bytearray([OP_TIER]) * 10
    partner[2], tier[2] = -1, 0
    align_module._unpair_reordered(partner, tier, a, b)
    assert (partner[5] == -1) == unpaired


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cycle_collector_pauses_for_a_diff_and_is_left_as_it_was(pair: tuple[Path, Path, dict],
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      enabled: bool) -> None:
    """engine.py's `_no_cycle_collection`: off while the verdict walks, as it was once the diff returns."""
    during: list[bool] = []
    walk = engine_module.find_divergence

    def spying(*args: Any, **kwargs: Any) -> Any:
        during.append(gc.isenabled())
        return walk(*args, **kwargs)

    monkeypatch.setattr(engine_module, "find_divergence", spying)
    (gc.enable if enabled else gc.disable)()
    try:
        result = diff_traces(pair[0], pair[1], Config())
        assert during == [False] and gc.isenabled() is enabled
        assert result.first is not None and result.first.a.index == pair[2]["planted"]["index_a"]
    finally:
        gc.enable()


def test_a_long_diff_tells_how_it_goes_on_stderr(pair: tuple[Path, Path, dict], monkeypatch: pytest.MonkeyPatch) -> None:
    """`tracediff diff` of traces past engine.PROGRESS_BYTES prints a line per stage and per million records of A
    walked (both shrunk here), on stderr: stdout keeps the report alone."""
    short = invoke("diff", str(pair[0]), str(pair[1]), "--format", "json")
    assert short.exit_code == 1 and "tracediff: diff:" not in short.stderr  # a short diff says nothing of it
    monkeypatch.setattr(engine_module, "PROGRESS_BYTES", 0)
    monkeypatch.setattr(walk_module, "_PROGRESS_EVERY", 2_000)
    long = invoke("diff", str(pair[0]), str(pair[1]), "--format", "json")
    assert long.exit_code == 1 and long.report["first_divergence"]["index"] == pair[2]["planted"]["index_a"]
    lines = [line for line in long.stderr.splitlines() if line.startswith("tracediff: diff:")]
    assert lines[0] == "tracediff: diff: reading both traces (pass 1 of 2: keys for the alignment)"
    assert "records to align" in lines[1] and "records paired" in lines[2] and "comparing them" in lines[2]
    walked = [line for line in lines[3:] if "records of A" in line]
    assert "compared 2,000 of " in walked[0] and len(walked) >= 3
    assert any("the first divergence found" in line for line in walked)  # the planted record is mid-way


def test_a_diff_of_traces_without_same_input_checks_never_imports_torch(pair: tuple[Path, Path, dict]) -> None:
    """torch's import costs a `tracediff diff` about 200 MB of memory and a second: only judging same-input checks
    (judge/measure.py) and, once a divergence is found, asking torch whether its op draws random numbers need it."""
    script = ("import sys\nfrom tracediff.cli import main\nsys.argv = ['tracediff', 'diff', sys.argv[1], sys.argv[2]]\n"
              "try:\n    main()\nexcept SystemExit as e:\n    print('exit', e.code, 'torch' in sys.modules)\n")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script, str(pair[0]), str(pair[0])], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(root)), timeout=300)
    assert done.stdout.splitlines()[-1] == "exit 0 False", done.stderr


def test_after_the_first_divergence_the_walk_files_nothing_and_reports_the_same(
        pair: tuple[Path, Path, dict], monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the first divergence is found the walk only counts echoes: it files no more producers for the walk
    back, which no rule reads any more (a drifting training run's diff reads on for a million records)."""
    a_path, b_path, meta = pair
    a, b = build_skeleton(a_path), build_skeleton(b_path)
    partner, tier = align(a, b)
    filed_at_first: dict[str, int] = {}

    def sizes(walker: Any) -> dict[str, int]:
        a_side, b_side = walker.walk.a_side, walker.walk.b_side
        return {"A unknown": len(a_side.unknown_producers), "B producers": len(b_side.producers),
                "B contents": len(b_side.by_content)}

    def walk(keep_filing: bool) -> tuple[Any, dict[str, int]]:
        walker = walk_module._Walker(a, b, partner, tier, Config(), None, None)
        stop = walker.walk.b_side.stop_filing

        def at_first() -> None:
            filed_at_first.update(sizes(walker))
            if not keep_filing:
                stop()
        monkeypatch.setattr(walker.walk.b_side, "stop_filing", at_first)
        if keep_filing:  # as the walk did before: A's unpaired records filed to the end too
            monkeypatch.setattr(walker, "_unknown", lambda ra, candidate: walker.walk.a_side.unknown(ra, candidate))
        walker.run()
        return walker.finish(), sizes(walker)

    kept, kept_sizes = walk(keep_filing=True)
    assert kept_sizes["B producers"] > filed_at_first["B producers"]  # the premise: records after the first
    stopped, stopped_sizes = walk(keep_filing=False)
    assert stopped_sizes == filed_at_first
    assert stopped.first is not None and stopped.first.a.index == meta["planted"]["index_a"]
    assert (stopped.first, stopped.compared, stopped.inherited, stopped.paired) == (
        kept.first, kept.compared, kept.inherited, kept.paired)


def test_a_skeletons_keys_are_released_once_aligned_and_not_read_again(pair: tuple[Path, Path, dict]) -> None:
    skeleton = build_skeleton(pair[0])
    length, regions = len(skeleton), bytes(skeleton.is_region)
    skeleton.release_keys()
    assert all(len(getattr(skeleton, name)) == 0 for name in KEY_COLUMNS)
    assert (len(skeleton), bytes(skeleton.is_region)) == (length, regions)  # what the walk and the counts read
    with pytest.raises(RuntimeError, match="released"):
        skeleton.window(0, 10)
