"""Long diffs skip what both traces hold alike: the digest index written with each trace, the stretches alike found
by it, and the diff of the rest giving the whole diff's verdict (diff/shortcut.py, trace/digest_index.py).

The pairs are bench/synth.py's (the diff-scale benchmark's traces, smaller): a 12-layer training step repeated,
scattered insertions and deletions, and one planted value divergence from which B's outputs all differ.
"""

from __future__ import annotations

import shutil
from array import array
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch

import tracediff.diff.engine as engine_module
import tracediff.diff.shortcut as shortcut_module
import tracediff.diff.verdict.walk as walk_module
import tracediff.trace.writer as writer_module
from tests.synth import TraceBuilder, bench_synth
from tracediff.config import Config
from tracediff.diff.engine import diff_traces
from tracediff.diff.shortcut import identical_stretches
from tracediff.outputs import rank_set
from tracediff.trace.digest_index import (
    IS_OP,
    KEEP,
    NO_VALUE,
    NONFINITE,
    index_path,
    line_entry,
    line_facts,
    read_digest_index,
)
from tracediff.trace.reader import read_footer
from tracediff.trace.writer import TraceWriter

RECORDS = 20_000


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("pair")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer_module, "INDEX_FROM_RECORDS", 0)  # indexed, though shorter than traces that are
        return folder, bench_synth().generate(folder, RECORDS, edits=40)


@pytest.fixture
def indexed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Traces written in the test are indexed whatever their length."""
    monkeypatch.setattr(writer_module, "INDEX_FROM_RECORDS", 0)


def _diff(a: Path, b: Path, shortcut: bool, monkeypatch: pytest.MonkeyPatch, tail: int = 2_000) -> Any:
    monkeypatch.setattr(engine_module, "SHORTCUT_BYTES", 0 if shortcut else 1 << 62)
    monkeypatch.setattr(shortcut_module, "TAIL_RECORDS", tail)
    taken: list[bool] = []
    original = shortcut_module.diff_by_shortcut

    def spy(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        taken.append(result is not None)
        return result

    monkeypatch.setattr(engine_module, "diff_by_shortcut", spy)
    result = diff_traces(a, b, Config())
    assert taken == ([True] if shortcut else [])
    return result


def _first(result: Any) -> tuple:
    first = result.first
    return first and (first.a.index, first.b.index, first.a.op, first.kind, first.inputs_agree)


def test_the_shortcut_names_the_planted_divergence_as_the_whole_diff_does(pair: tuple[Path, dict[str, Any]],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    folder, meta = pair
    whole = _diff(folder / "a.jsonl", folder / "b.jsonl", False, monkeypatch)
    short = _diff(folder / "a.jsonl", folder / "b.jsonl", True, monkeypatch)
    planted = meta["planted"]
    assert _first(short) == _first(whole) == (planted["index_a"], planted["index_b"], planted["op"], "output", True)
    # After the planted record B's values all differ and pair by op alone, where they can: the shorter problem the
    # kept records make pairs a few more of them (137 of about 9,000 here), as aligning in windows does.
    assert short.inherited_complete == whole.inherited_complete
    assert abs(short.inherited - whole.inherited) < 0.05 * whole.inherited
    assert short.structure[:3] == whole.structure[:3]  # the same records on one side only, the first ones
    assert short.a.path == folder / "a.jsonl" and short.b.path == folder / "b.jsonl"


def test_a_tail_read_in_part_is_read_further_until_the_walk_ends_in_it(pair: tuple[Path, dict[str, Any]],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk stops after 500 echoes here: 200 records of the tail hold too few, so the diff reads 8 times more,
    and stops where the whole diff does."""
    folder, meta = pair
    monkeypatch.setattr(walk_module, "_INHERITED_LIMIT", 500)
    tails: list[int] = []
    original = shortcut_module._write_what_differs

    def counted(*args: Any, **kwargs: Any) -> Any:
        tails.append(args[3])
        return original(*args, **kwargs)

    monkeypatch.setattr(shortcut_module, "_write_what_differs", counted)
    short = _diff(folder / "a.jsonl", folder / "b.jsonl", True, monkeypatch, tail=200)
    assert tails == [200, 1600]
    whole = _diff(folder / "a.jsonl", folder / "b.jsonl", False, monkeypatch)
    assert _first(short) == _first(whole)
    assert _first(short)[:2] == (meta["planted"]["index_a"], meta["planted"]["index_b"])
    assert not short.inherited_complete and not whole.inherited_complete
    assert short.inherited == whole.inherited == 500 and short.read_to is not None


def test_traces_alike_match_with_every_record_counted(pair: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = pair
    for name in ("a.jsonl", "a.jsonl.idx"):
        shutil.copy(folder / name, tmp_path / name.replace("a.", "again."))
    whole = _diff(folder / "a.jsonl", tmp_path / "again.jsonl", False, monkeypatch)
    short = _diff(folder / "a.jsonl", tmp_path / "again.jsonl", True, monkeypatch)
    assert whole.first is None and short.first is None
    assert (short.compared, short.paired, short.unpaired_a, short.unpaired_b, len(short.a), short.a.ops) == \
           (whole.compared, whole.paired, whole.unpaired_a, whole.unpaired_b, len(whole.a), whole.a.ops)


def test_a_nan_in_a_stretch_alike_is_still_the_nan_origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          indexed: None) -> None:
    """Records with a NaN are never left out: the first NaN's origin is found where the whole diff finds it."""
    paths = []
    for side in ("a", "b"):
        t = TraceBuilder(tmp_path / f"{side}.jsonl")
        x = torch.linspace(-1, 1, 16)
        for k in range(600):
            y = x * (1 + k / 1000)
            if k == 300:
                y = torch.log(x - 2)  # NaN everywhere
            elif side == "b" and k == 500:
                y = y * 1.5  # the divergence, after the NaN
            t.op("aten::mul.Tensor", [t.tensor("x", x)], [t.tensor(f"y{k}", y, "0")], src=f"model.py:{10 + k % 7}")
        paths.append(t.close())
    whole = _diff(*paths, False, monkeypatch)
    short = _diff(*paths, True, monkeypatch)
    assert whole.a.nan_origin is not None
    assert str(short.a.nan_origin) == str(whole.a.nan_origin) and str(short.b.nan_origin) == str(whole.b.nan_origin)
    assert _first(short) == _first(whole) and _first(short)[0] == 500


def test_no_index_or_a_stale_one_diffs_the_long_way(pair: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = pair
    shutil.copy(folder / "a.jsonl", tmp_path / "a.jsonl")
    footer = read_footer(tmp_path / "a.jsonl")
    assert footer is not None
    assert read_digest_index(tmp_path / "a.jsonl", footer["records"]) is None  # copied without its index
    shutil.copy(folder / "b.jsonl.idx", tmp_path / "a.jsonl.idx")  # another trace's index
    assert read_digest_index(tmp_path / "a.jsonl", footer["records"]) is None
    shutil.copy(folder / "a.jsonl.idx", tmp_path / "a.jsonl.idx")
    assert read_digest_index(tmp_path / "a.jsonl", footer["records"]) is not None
    with open(tmp_path / "a.jsonl", "ab") as f:  # the trace changed since
        f.write(b"\n")
    assert read_digest_index(tmp_path / "a.jsonl", footer["records"]) is None
    monkeypatch.setattr(engine_module, "SHORTCUT_BYTES", 0)
    assert diff_traces(folder / "a.jsonl", folder / "a.jsonl", Config()).first is None


def test_only_a_long_trace_is_indexed_once_closed_and_a_forked_copy_indexes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "INDEX_FROM_RECORDS", 3)
    record = {"t": "op", "i": 0, "op": "aten::cos", "in": [], "out": []}
    for records, ends in ((2, "close"), (3, "close"), (3, "abandon"), (3, "fork")):
        path = tmp_path / f"{records}-{ends}.jsonl"
        writer = TraceWriter(path, {"backend": "eager"})
        for _ in range(records):
            writer.write(record)
        if ends == "fork":
            writer.silence_in_child()  # as in a forked child: its close must leave the parent's trace alone
        writer.abandon() if ends == "abandon" else writer.close()
        indexed = read_digest_index(path, (read_footer(path) or {}).get("records"))
        assert index_path(path).exists() == (indexed is not None) == (records == 3 and ends == "close"), path.name
    # Any compression the writer writes is indexed, and the index read back.
    for name in ("t.jsonl.gz", "t.jsonl.zst"):
        writer = TraceWriter(tmp_path / name, {"backend": "eager"})
        for _ in range(3):
            writer.write(record)
        writer.close()
        index = read_digest_index(tmp_path / name, 3)
        assert index is not None and len(index) == 4 and index.facts[0] == IS_OP, name
    # A trace written again where a long one was: the earlier index goes.
    writer = TraceWriter(tmp_path / "3-close.jsonl", {"backend": "eager"})
    assert not index_path(tmp_path / "3-close.jsonl").exists()
    writer.close()


def test_a_compressed_trace_has_its_index_and_diffs_by_it(pair: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, indexed: None) -> None:
    folder, meta = pair
    copies = []
    for side in ("a", "b"):
        source, target = folder / f"{side}.jsonl", tmp_path / f"{side}.jsonl.zst"
        lines = source.read_bytes().splitlines(keepends=True)
        writer = TraceWriter(target, {k: v for k, v in orjson.loads(lines[0]).items() if k not in ("t", "schema")})
        for line in lines[1:-1]:
            writer.write(orjson.loads(line))
        footer = orjson.loads(lines[-1])
        writer.close({k: v for k, v in footer.items() if k not in ("t", "complete", "records")})
        copies.append(target)
    assert all(index_path(c).exists() for c in copies)
    short = _diff(*copies, True, monkeypatch)
    assert _first(short)[:2] == (meta["planted"]["index_a"], meta["planted"]["index_b"])
    # Read through (a compressed trace cannot seek), the kept records and the lines looked up are the plain one's.
    (tmp_path / "p").mkdir()
    (tmp_path / "z").mkdir()
    kept_plain = shortcut_module._write_what_differs(folder / "a.jsonl", folder / "b.jsonl", tmp_path / "p", 2_000,
                                                     None)
    kept_zst = shortcut_module._write_what_differs(*copies, tmp_path / "z", 2_000, None)
    assert kept_plain is not None and kept_zst is not None
    assert (kept_plain.a.read_bytes(), kept_plain.b.read_bytes()) == (kept_zst.a.read_bytes(), kept_zst.b.read_bytes())
    assert (kept_plain.op_lines_a, kept_plain.stretches, kept_plain.last_needed) == \
           (kept_zst.op_lines_a, kept_zst.stretches, kept_zst.last_needed)
    assert kept_plain.stretches and all(after is not None for _, after in kept_plain.stretches)


def test_the_digest_leaves_out_sequence_numbers_and_tensor_ids_not_values() -> None:
    line = (b'{"t":"op","i":7,"op":"aten::mul.Tensor","src":"m.py:3","in":[{"a":"self","id":12,"v":0,"dt":"float32",'
            b'"sh":[2],"fp":{"sum":1.5,"nan":0,"inf":0,"n":2}}],"out":[{"a":"0","id":13,"b":12,"v":0,"dt":"float32",'
            b'"sh":[2],"fp":{"sum":3.0,"nan":0,"inf":0,"n":2}}]}\n')
    shifted = line.replace(b'"i":7', b'"i":9').replace(b'"id":12', b'"id":40').replace(b'"id":13', b'"id":41') \
        .replace(b'"b":12', b'"b":40')
    other_value = line.replace(b'"sum":3.0', b'"sum":3.0000001')
    other_shape = line.replace(b'"sh":[2],"fp":{"sum":3.0', b'"sh":[1,2],"fp":{"sum":3.0')
    digest = line_entry(line, 0)[0]
    assert line_entry(shifted, 0)[0] == digest
    assert line_entry(other_value, 0)[0] != digest
    assert line_entry(other_shape, 0)[0] != digest
    assert line_facts(line) == IS_OP
    assert line_facts(line.replace(b'"sum":3.0,"nan":0', b'"sum":3.0,"nan":1')) == IS_OP | KEEP | NONFINITE
    assert line_facts(line.replace(b'aten::mul.Tensor', b'aten::detach')) == IS_OP | NO_VALUE
    assert line_facts(b'{"t":"region","i":3,"ev":"enter"}\n') == KEEP


def test_stretches_alike_around_insertions_deletions_and_changed_records() -> None:
    a = array("q", range(1, 1001))
    b = array("q", [*range(1, 101), -1, *range(101, 301), *range(302, 501), -2, -3, *range(503, 1001)])
    stretches, tail = identical_stretches(a, b)
    assert tail is None
    # B inserts one record after A's 100th, drops A's 301st, and changes A's 501st and 502nd.
    assert [(s.a, s.b, s.length) for s in stretches] == [(0, 0, 100), (100, 101, 200), (301, 301, 199),
                                                         (502, 502, 498)]
    out_of_step = array("q", [*range(1, 101), *range(5001, 6001)])
    assert identical_stretches(a, out_of_step)[1] == (100, 100)


def test_a_rank_set_does_not_take_the_indexes_for_traces(tmp_path: Path, indexed: None) -> None:
    for rank in (0, 1):
        TraceWriter(tmp_path / f"t.rank{rank}.jsonl", {"backend": "eager"}).close()
    assert (tmp_path / "t.rank0.jsonl.idx").exists()
    assert rank_set(tmp_path) == [tmp_path / "t.rank0.jsonl", tmp_path / "t.rank1.jsonl"]

