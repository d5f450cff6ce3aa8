"""`tracediff show`: the listing renderer and its filters, on small recorded traces."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

import tracediff
from tracediff.errors import UserError
from tracediff.report.listing import ListingFilter, parse_range, render_listing
from tracediff.trace.reader import Trace
from tracediff.trace.writer import TraceWriter

OP_LINE = re.compile(r"^\s*#(\d+) ")


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = torch.nn.Linear(4, 4)
        self.act = torch.nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.l(x)
        y = torch.cos(y)
        return self.act(y)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


@pytest.fixture(scope="module")
def forward_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Forward only, then a NaN producer and an uninitialized tensor."""
    path = tmp_path_factory.mktemp("listing") / "forward.jsonl"
    torch.manual_seed(0)
    model = Net()
    with tracediff.record(path, seed=0):
        x = torch.randn(3, 4)
        model(x).sum()
        torch.log(-x)
        torch.empty(3)
    return path


@pytest.fixture(scope="module")
def backward_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("listing") / "backward.jsonl"
    torch.manual_seed(0)
    model = Net()
    with tracediff.record(path, seed=0):
        x = torch.randn(3, 4)
        model(x).sum().backward()
    return path


def _listing(path: Path, flt: ListingFilter | None = None, **kwargs: Any) -> list[str]:
    return list(render_listing(Trace(path), flt or ListingFilter(), **kwargs))


def _op_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if OP_LINE.match(line)]


def _op_indices(lines: list[str]) -> list[int]:
    return [int(OP_LINE.match(line).group(1)) for line in _op_lines(lines)]  # type: ignore[union-attr]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _records(path: Path) -> list[dict[str, Any]]:
    return list(Trace(path))


# -- the unfiltered listing --------------------------------------------------------------


def test_header_summary(forward_trace: Path) -> None:
    lines = _listing(forward_trace)
    head = "\n".join(lines[:4])
    header = Trace(forward_trace).header
    assert f"backend {header['backend']}" in head
    assert f"torch {torch.__version__}" in head
    assert f"device {header['device']}" in head
    assert "seed 0" in head
    assert "command " in head


def test_every_op_listed_once_in_order(forward_trace: Path) -> None:
    lines = _listing(forward_trace)
    ops = [r for r in _records(forward_trace) if r["t"] == "op"]
    assert _op_indices(lines) == [r["i"] for r in ops]
    for line, record in zip(_op_lines(lines), ops):
        assert f" {record['op']}(" in line


def test_op_line_format(forward_trace: Path) -> None:
    lines = _listing(forward_trace)
    cos = next(r for r in _records(forward_trace) if r["op"] == "aten::cos")
    (line,) = [line for line in lines if "aten::cos(" in line]
    t_in, t_out = cos["in"][0], cos["out"][0]
    expected_in = f"self=t{t_in['id']} f32[3,4] sum={t_in['fp']['sum']:.4g} max={t_in['fp']['max']:.4g}"
    expected_out = f"-> t{t_out['id']} f32[3,4] sum={t_out['fp']['sum']:.4g} max={t_out['fp']['max']:.4g}"
    assert line.strip() == f"#{cos['i']} aten::cos({expected_in}) {expected_out}"
    assert "[bw]" not in line and "(graph)" not in line


def test_module_and_source_context(forward_trace: Path) -> None:
    lines = _listing(forward_trace)
    assert any(line.strip() == "[Net.block.l]" for line in lines)
    block = next(i for i, line in enumerate(lines) if line.strip() == "[Net.block]")
    act = next(i for i, line in enumerate(lines) if line.strip() == "[Net.block.act]")
    assert _indent(lines[act]) > _indent(lines[block])  # deeper module, deeper indent
    cos = next(i for i, line in enumerate(lines) if "aten::cos(" in line)
    assert block < cos < act
    source = lines[cos - 1].strip()
    assert re.fullmatch(r"test_listing\.py:\d+  y = torch\.cos\(y\)", source), source
    assert _indent(lines[cos]) > _indent(lines[cos - 1]) > _indent(lines[block])


def test_context_lines_only_on_change(forward_trace: Path) -> None:
    lines = _listing(forward_trace)
    linear = [line for line in lines if "y = self.l(x)" in line]
    assert len(linear) == 1  # t and addmm share one source line
    assert sum(line.strip() == "[Net.block.l]" for line in lines) == 1


def test_footer_line(forward_trace: Path) -> None:
    lines = _listing(forward_trace)
    trace = Trace(forward_trace)
    ops = sum(1 for r in trace if r["t"] == "op")
    assert ops == trace.footer["ops"]  # type: ignore[index]
    assert lines[-1] == f"{ops} ops, 0 regions; complete"


def test_nan_and_uninit_shown(forward_trace: Path) -> None:
    lines = _listing(forward_trace)
    (log,) = [line for line in lines if "aten::log(" in line]
    assert re.search(r"-> t\d+ f32\[3,4\] sum=\S+ max=\S+ nan=\d+$", log), log
    (empty,) = [line for line in lines if "aten::empty" in line]
    assert empty.endswith("f32[3] uninit")
    (neg,) = [line for line in lines if "aten::neg(" in line]
    assert "nan=" not in neg and "inf=" not in neg


def test_failed_script_footer(tmp_path: Path) -> None:
    path = tmp_path / "failed.jsonl"
    with pytest.raises(ValueError):
        with tracediff.record(path):
            torch.ones(2).cos()
            raise ValueError("bad shapes\nsecond line")
    lines = _listing(path)
    assert lines[-1] == "2 ops, 0 regions; script raised ValueError: bad shapes"


def test_dtypes_and_empty_record(tmp_path: Path) -> None:
    path = tmp_path / "dtypes.jsonl"
    with tracediff.record(path):
        i = torch.arange(3)
        b = i > 1
        torch.ones(2, dtype=torch.float64).to(torch.bfloat16)
        torch.zeros(2, dtype=torch.float16)
    text = "\n".join(_listing(path))
    for short in ("i64[3]", "b8[3]", "f64[2]", "bf16[2]", "f16[2]"):
        assert short in text, short
    del b


def test_empty_trace(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    with tracediff.record(path):
        pass
    lines = _listing(path)
    assert lines[-2:] == ["no ops recorded", "0 ops, 0 regions; complete"]


# -- backward ----------------------------------------------------------------------------


def test_backward_tags(backward_trace: Path) -> None:
    lines = _listing(backward_trace)
    records = {r["i"]: r for r in _records(backward_trace)}
    assert any(r.get("bw") for r in records.values())
    for line in _op_lines(lines):
        record = records[int(OP_LINE.match(line).group(1))]  # type: ignore[union-attr]
        assert line.endswith(" [bw]") == bool(record.get("bw")), line
    assert any("gelu_backward" in line and line.endswith("[bw]") for line in lines)
    assert not any("aten::gelu(" in line and "[bw]" in line for line in lines)


# -- filters -------------------------------------------------------------------------------


def test_op_filter(forward_trace: Path) -> None:
    lines = _listing(forward_trace, ListingFilter(op="cos"))
    ops = _op_lines(lines)
    assert len(ops) == 1 and "aten::cos(" in ops[0]
    cos = lines.index(ops[0])
    assert "torch.cos(y)" in lines[cos - 1]  # source context kept
    assert lines[cos - 2].strip() == "[Net.block]"  # module context kept
    assert "op contains 'cos'" in "\n".join(lines[:5])
    total = sum(1 for r in _records(forward_trace) if r["t"] == "op")
    assert lines[-1] == f"{total} ops (1 shown), 0 regions; complete"


def test_op_filter_full_name(forward_trace: Path) -> None:
    ops = _op_lines(_listing(forward_trace, ListingFilter(op="aten::addmm")))
    assert len(ops) == 2 and all("aten::addmm(" in line for line in ops)


def test_module_filter(forward_trace: Path) -> None:
    records = [r for r in _records(forward_trace) if r["t"] == "op"]
    lines = _listing(forward_trace, ListingFilter(module="Net.block"))
    kept = [r["i"] for r in records if r["m"] in ("Net.block", "Net.block.l", "Net.block.act")]
    assert kept and _op_indices(lines) == kept
    assert not any("[Net.head]" in line for line in lines)
    only_l = _listing(forward_trace, ListingFilter(module="Net.block.l"))
    assert _op_indices(only_l) == [r["i"] for r in records if r["m"] == "Net.block.l"]


def test_module_filter_matches_whole_components(forward_trace: Path) -> None:
    lines = _listing(forward_trace, ListingFilter(module="Net.bl"))
    assert _op_lines(lines) == []
    assert any(line.startswith("no records match the filters") for line in lines)


def test_range_filter(forward_trace: Path) -> None:
    lines = _listing(forward_trace, ListingFilter(index_range=parse_range("2:4")))
    assert _op_indices(lines) == [2, 3]
    assert any("[Net.block" in line for line in lines)  # context for the first kept op


def test_single_index_and_open_ranges(forward_trace: Path) -> None:
    n = sum(1 for r in _records(forward_trace) if r["t"] == "op")
    assert _op_indices(_listing(forward_trace, ListingFilter(index_range=parse_range("5")))) == [5]
    assert _op_indices(_listing(forward_trace, ListingFilter(index_range=parse_range(":3")))) == [0, 1, 2]
    tail = _listing(forward_trace, ListingFilter(index_range=parse_range(f"{n - 2}:")))
    assert _op_indices(tail) == [n - 2, n - 1]
    assert tail[-1].endswith("; complete")  # an open end reads to the footer


def test_nan_only(forward_trace: Path) -> None:
    lines = _listing(forward_trace, ListingFilter(nan_only=True))
    ops = _op_lines(lines)
    assert len(ops) == 1 and "aten::log(" in ops[0] and "nan=" in ops[0]
    assert "torch.log(-x)" in lines[lines.index(ops[0]) - 1]


def test_nan_only_counts_inf(tmp_path: Path) -> None:
    path = tmp_path / "inf.jsonl"
    with tracediff.record(path):
        z = torch.zeros(3)
        torch.log(z)
        torch.exp(z)
    ops = _op_lines(_listing(path, ListingFilter(nan_only=True)))
    assert len(ops) == 1 and "aten::log(" in ops[0] and "inf=3" in ops[0]


def test_filters_combine(forward_trace: Path) -> None:
    lines = _listing(forward_trace, ListingFilter(op="addmm", module="Net.head"))
    ops = _op_lines(lines)
    assert len(ops) == 1 and "aten::addmm(" in ops[0]
    assert any(line.strip() == "[Net.head]" for line in lines)


def test_nothing_kept(forward_trace: Path) -> None:
    lines = _listing(forward_trace, ListingFilter(op="no_such_op"))
    assert _op_lines(lines) == []
    assert sum(line.startswith("no records match") for line in lines) == 1
    assert "no_such_op" in next(line for line in lines if line.startswith("no records match"))


def test_max_lines(forward_trace: Path) -> None:
    full = _listing(forward_trace)
    capped = _listing(forward_trace, max_lines=3)
    header = 3  # trace, backend/torch/device/seed, command
    assert capped[: header + 3] == full[: header + 3]
    assert len(capped) == header + 3 + 1
    assert "stopped after 3 lines" in capped[-1]
    assert len(_listing(forward_trace, max_lines=len(full))) == len(full)  # enough room: no stop line


# -- cut-off traces ------------------------------------------------------------------------


def test_truncated_half_written_line(forward_trace: Path, tmp_path: Path) -> None:
    lines = forward_trace.read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:5]) + lines[5][:30])  # header, 4 records, half a record
    listing = _listing(cut)
    assert _op_indices(listing) == [0, 1, 2, 3]
    assert listing[-1] == (
        "TRUNCATED: trace ends at line 6 without a footer (the recorded run crashed or was killed); "
        "showing what is there"
    )
    assert not any("complete" in line for line in listing)


def test_truncated_abandoned(tmp_path: Path) -> None:
    path = tmp_path / "abandoned.jsonl"
    writer = TraceWriter(path, {"backend": "eager", "torch": "x", "device": "cpu", "command": ["a.py"], "seed": 1})
    writer.write({"t": "op", "i": 0, "op": "aten::sin", "m": None, "in": [], "out": []})
    writer.abandon()
    listing = _listing(path)
    assert _op_indices(listing) == [0]
    assert listing[-1].startswith("TRUNCATED: trace ends at line 2 without a footer")


# -- records written by hand: regions, graphs, kernels, missing data ---------------------------


def _tensor(tid: int, fp: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    return {"a": "self", "id": tid, "v": 0, "dt": "float32", "sh": [2], "dev": "cpu", "fp": fp, **extra}


_FP = {"sum": 1.0, "l1": 1.0, "l2": 1.0, "max": 0.5, "nan": 0, "inf": 0, "n": 2}


@pytest.fixture()
def compiled_trace(tmp_path: Path) -> Path:
    path = tmp_path / "compiled.jsonl"
    writer = TraceWriter(path, {"backend": "aot_eager", "torch": "x", "device": "cpu", "command": ["m.py"], "seed": 0})
    writer.write({"t": "op", "i": 0, "op": "aten::randn", "d": 0, "m": None, "src": "m.py:3", "code": "x = randn()",
                  "in": [], "out": [_tensor(0, _FP)]})
    writer.write({"t": "region", "i": 1, "ev": "enter", "name": "Net.forward", "r": 0, "call": 0, "d": 0, "m": "Net",
                  "in": [_tensor(0, _FP)]})
    writer.write({"t": "op", "i": 2, "op": "aten::sin", "d": 1, "m": "Net.l", "src": "m.py:7", "code": "y = x.sin()",
                  "g": "GraphModule", "in": [_tensor(0, None)], "out": [_tensor(1, None)]})
    writer.write({"t": "kernel", "i": 3, "name": "triton_poi_fused_cos_sin_0", "m": "Net.l",
                  "fuses": [{"op": "aten::sin", "src": "m.py:7", "m": "Net.l"},
                            {"op": "aten::cos", "src": "m.py:7", "m": "Net.l"}],
                  "in": [_tensor(0, _FP)], "out": [_tensor(2, dict(_FP, nan=2))]})
    writer.write({"t": "region", "i": 4, "ev": "exit", "name": "Net.forward", "r": 0, "call": 0, "d": 0,
                  "out": [_tensor(2, _FP)]})
    writer.write({"t": "op", "i": 5, "op": "aten::sum", "d": 0, "m": None, "src": "m.py:9", "code": "s = y.sum()",
                  "in": [_tensor(2, _FP)], "out": [_tensor(3, _FP)]})
    writer.close({"ops": 3, "error": None})
    return path


def test_regions_graph_and_kernel(compiled_trace: Path) -> None:
    lines = _listing(compiled_trace)
    body = [line.strip() for line in lines[3:]]
    enter = body.index(">> compiled region Net.forward call 0")
    leave = body.index("<< compiled region Net.forward call 0")
    sin = next(i for i, line in enumerate(body) if "aten::sin(" in line)
    kernel = next(i for i, line in enumerate(body) if " kernel " in line)
    assert enter < sin < kernel < leave
    assert body[sin].endswith("(graph)")
    assert "self=t0 f32[2] (no data)" in body[sin] and "-> t1 f32[2] (no data)" in body[sin]
    assert body[kernel].startswith("#3 kernel triton_poi_fused_cos_sin_0 fuses aten::sin, aten::cos (m.py:7)")
    assert "nan=2" in body[kernel]
    # inside the region, lines are indented one step deeper than the region markers
    region_line = lines[3 + enter]
    assert _indent(lines[3 + sin]) > _indent(region_line)
    # after the region, the top-level module context is shown again
    assert body[leave + 1] == "[top level]"
    assert lines[-1] == "3 ops, 1 kernels, 1 regions; complete"


def test_region_shown_as_context_when_filtered(compiled_trace: Path) -> None:
    lines = [line.strip() for line in _listing(compiled_trace, ListingFilter(op="sin"))]
    body = lines[4:]  # header + filter description
    assert body[0] == ">> compiled region Net.forward call 0"
    assert "<< compiled region Net.forward call 0" not in body
    # the kernel fusing aten::sin matches too
    assert [line.split()[0] for line in body if line.startswith("#")] == ["#2", "#3"]


def test_kernel_filters(compiled_trace: Path) -> None:
    nan = _op_lines(_listing(compiled_trace, ListingFilter(nan_only=True)))
    assert len(nan) == 1 and " kernel " in nan[0]
    by_name = _op_lines(_listing(compiled_trace, ListingFilter(op="triton_poi")))
    assert len(by_name) == 1
    by_module = _op_lines(_listing(compiled_trace, ListingFilter(module="Net")))
    assert [line.split()[0] for line in by_module] == ["#2", "#3"]


def test_range_inside_region(compiled_trace: Path) -> None:
    lines = [line.strip() for line in _listing(compiled_trace, ListingFilter(index_range=(2, 5)))]
    body = lines[4:]
    assert body[0] == ">> compiled region Net.forward call 0"  # context: the enter (i=1) is out of range
    assert "<< compiled region Net.forward call 0" in body  # the exit (i=4) is in range
    assert "stopped reading at record 5" in body[-1]


# -- parse_range ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10:20", (10, 20)), ("0:1", (0, 1)), ("15", (15, 16)), (" 3 : 7 ", (3, 7)), ("0", (0, 1))],
)
def test_parse_range(text: str, expected: tuple[int, int]) -> None:
    assert parse_range(text) == expected


def test_parse_open_ranges() -> None:
    start, end = parse_range("10:")
    assert start == 10 and end > 10**15
    assert parse_range(":20") == (0, 20)


@pytest.mark.parametrize("text", ["", "abc", "1:2:3", "5:3", "4:4", "-1", "-3:5", "1.5", "a:b", "x:", ":y", "1e3"])
def test_parse_range_bad(text: str) -> None:
    with pytest.raises(UserError) as info:
        parse_range(text)
    message = str(info.value)
    assert "\n" not in message and "range" in message


def test_each_region_call_gets_its_context_line(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    writer = TraceWriter(path, {"backend": "aot_eager", "command": ["m.py"]})
    i = 0
    for call in range(3):
        writer.write({"t": "region", "i": i, "ev": "enter", "name": "f", "r": 0, "call": call, "in": []})
        writer.write({"t": "op", "i": i + 1, "op": "aten::cos", "m": None, "g": "g", "in": [], "out": []})
        writer.write({"t": "op", "i": i + 2, "op": "aten::sin", "m": None, "g": "g", "in": [], "out": []})
        writer.write({"t": "region", "i": i + 3, "ev": "exit", "name": "f", "r": 0, "call": call, "out": []})
        i += 4
    writer.close()
    lines = [line.strip() for line in _listing(path, ListingFilter(op="cos"))]
    assert [line for line in lines if line.startswith(">>")] == [f">> compiled region f call {c}" for c in range(3)]
    assert lines[-1] == "6 ops (3 shown), 3 regions; complete"
