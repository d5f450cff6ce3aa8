"""`tracediff show TRACE`: one trace as a readable, hierarchical listing.

A pure renderer: it reads records from a `Trace` as they stream (never the
whole file at once) and yields text lines, in the spirit of torch DebugMode's
`debug_string`:

    [Net.block]
      model.py:9  y = torch.cos(y)
        #3 aten::cos(self=t4 f32[3,4] sum=-1.767 max=2.269) -> t5 f32[3,4] sum=7.883 max=0.999

A context line is written when the module path or the source line changes, and
compiled regions show as `>> compiled region ...` / `<< ...` lines. Filters
keep some ops; the context of every kept op (module, source line, region) is
still written before it, so the user sees where it is.
"""

from __future__ import annotations

import shlex
import sys
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tracediff.diff.compare import has_nonfinite
from tracediff.errors import UserError
from tracediff.trace.reader import Trace
from tracediff.trace.schema import KERNEL, OP, REGION, Tensor, TraceRecord

_DTYPE_SHORT: Mapping[str, str] = types.MappingProxyType(
    {
        "float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16",
        "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2", "float8_e4m3fnuz": "f8e4m3z", "float8_e5m2fnuz": "f8e5m2z",
        "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8",
        "uint64": "u64", "uint32": "u32", "uint16": "u16", "uint8": "u8", "bool": "b8",
        "complex128": "c128", "complex64": "c64", "complex32": "c32",
    }
)

_MAX_TENSORS_SHOWN = 8  # per side of an op line; `cat` of 100 tensors stays one readable line
_TOP_LEVEL = "top level"  # the module line of ops that run outside any nn.Module
_LEFT_REGION = -1  # `shown_region` after an exit line: the region context must be shown again


@dataclass(frozen=True)
class ListingFilter:
    """Which records `render_listing` shows; all given conditions must hold."""

    op: str | None = None  # keep ops whose name contains this (e.g. "cos", "aten::addmm")
    module: str | None = None  # keep ops whose module path equals this or is under it
    index_range: tuple[int, int] | None = None  # keep records with start <= i < end
    nan_only: bool = False  # keep ops with an output holding NaN or Inf

    @property
    def active(self) -> bool:
        return self.op is not None or self.module is not None or self.index_range is not None or self.nan_only

    @property
    def selects_ops(self) -> bool:
        """True when the filter picks ops by content: regions then show only as context."""
        return self.op is not None or self.module is not None or self.nan_only

    def describe(self) -> str:
        parts = []
        if self.op is not None:
            parts.append(f"op contains {self.op!r}")
        if self.module is not None:
            parts.append(f"module {self.module!r}")
        if self.index_range is not None:
            parts.append(f"records {_format_range(self.index_range)}")
        if self.nan_only:
            parts.append("NaN/Inf outputs")
        return ", ".join(parts)


def parse_range(text: str) -> tuple[int, int]:
    """`"10:20"`, `"10:"`, `":20"` or `"15"` (that record alone) as a half-open (start, end)."""
    spec = text.strip()
    if spec.count(":") > 1 or not spec:
        raise UserError(f"bad range {text!r}: expected START:END, START:, :END or INDEX (e.g. 10:20)")
    if ":" not in spec:
        index = _parse_index(spec, text)
        return index, index + 1
    start_text, end_text = (part.strip() for part in spec.split(":"))
    start = _parse_index(start_text, text) if start_text else 0
    end = _parse_index(end_text, text) if end_text else sys.maxsize
    if end <= start:
        raise UserError(f"bad range {text!r}: empty, the end must be greater than the start")
    return start, end


def _parse_index(part: str, text: str) -> int:
    try:
        value = int(part)
    except ValueError:
        raise UserError(f"bad range {text!r}: {part!r} is not a record index (a whole number)") from None
    if value < 0:
        raise UserError(f"bad range {text!r}: record indices count from 0")
    return value


def _format_range(index_range: tuple[int, int]) -> str:
    start, end = index_range
    return f"{start}:" if end == sys.maxsize else f"{start}:{end}"


# -- formatting one record ---------------------------------------------------------


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def short_dtype(dtype: str) -> str:
    """`float32` -> `f32`; unknown dtypes keep their name."""
    return _DTYPE_SHORT.get(dtype, dtype)


def format_tensor(tensor: Tensor) -> str:
    """`t9 f32[3,4] sum=2.086 max=1.2 nan=3`, `(no data)` without a fingerprint, `uninit` for garbage memory."""
    shape = ",".join(str(s) for s in tensor.get("sh", []))
    text = f"t{tensor.get('id', '?')} {short_dtype(str(tensor.get('dt', '?')))}[{shape}]"
    if tensor.get("uninit"):
        return f"{text} uninit"
    fp = tensor.get("fp")
    if not fp:
        return f"{text} (no data)"
    stats = [f"sum={_num(fp.get('sum'))}", f"max={_num(fp.get('max'))}"]
    stats += [f"{key}={fp.get(key)}" for key in ("nan", "inf") if fp.get(key)]
    return f"{text} {' '.join(stats)}"


def _format_tensors(tensors: list[Tensor], named: bool) -> list[str]:
    shown = [
        f"{t.get('a')}={format_tensor(t)}" if named and t.get("a") is not None else format_tensor(t)
        for t in tensors[:_MAX_TENSORS_SHOWN]
    ]
    if len(tensors) > _MAX_TENSORS_SHOWN:
        shown.append(f"... +{len(tensors) - _MAX_TENSORS_SHOWN} more")
    return shown


def _format_outputs(tensors: list[Tensor]) -> str:
    shown = _format_tensors(tensors, named=False)
    if len(tensors) == 1:
        return shown[0]
    return f"({', '.join(shown)})"


def _tags(record: TraceRecord) -> str:
    tags = (" [bw]" if record.get("bw") else "") + (" (graph)" if record.get("g") else "")
    return tags


def format_op(record: TraceRecord) -> str:
    """`#11 aten::cos(self=t9 f32[3,4] sum=2.086 max=1.2) -> t10 f32[3,4] sum=10.04 max=0.99 [bw]`."""
    inputs = ", ".join(_format_tensors(record.get("in") or [], named=True))
    outputs = record.get("out") or []
    text = f"#{record.get('i', '?')} {record.get('op', '?')}({inputs})"
    if outputs:
        text += f" -> {_format_outputs(outputs)}"
    return text + _tags(record)


def format_kernel(record: TraceRecord) -> str:
    """`#N kernel NAME fuses aten::sin, aten::cos (file.py:7)` (+ outputs when recorded)."""
    fuses = record.get("fuses") or []
    ops = _unique(str(f.get("op")) for f in fuses if f.get("op"))
    sources = _unique(str(f.get("src")) for f in fuses if f.get("src"))
    text = f"#{record.get('i', '?')} kernel {record.get('name', '?')}"
    if ops:
        text += f" fuses {', '.join(ops)}"
    if sources:
        text += f" ({', '.join(sources)})"
    outputs = record.get("out") or []
    if outputs:
        text += f" -> {_format_outputs(outputs)}"
    return text + _tags(record)


def format_region(record: TraceRecord) -> str:
    """`>> compiled region Net.forward call 0` on enter, `<< ...` on exit."""
    arrow = "<<" if record.get("ev") == "exit" else ">>"
    return f"{arrow} compiled region {record.get('name', '?')} call {record.get('call', '?')}"


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# -- filtering -----------------------------------------------------------------------


def _in_module(module: str | None, prefix: str) -> bool:
    return module is not None and (module == prefix or module.startswith(prefix + "."))


def _modules_of(record: TraceRecord) -> list[str | None]:
    if record.get("t") == KERNEL:
        return [record.get("m")] + [f.get("m") for f in record.get("fuses") or []]
    return [record.get("m")]


def _names_of(record: TraceRecord) -> list[str]:
    if record.get("t") == KERNEL:
        return [str(record.get("name", ""))] + [str(f.get("op", "")) for f in record.get("fuses") or []]
    return [str(record.get("op", ""))]


def _has_nonfinite_output(record: TraceRecord) -> bool:
    return any(has_nonfinite(t.get("fp")) and not t.get("uninit") for t in record.get("out") or [])


def _in_range(record: TraceRecord, flt: ListingFilter) -> bool:
    if flt.index_range is None:
        return True
    index = record.get("i")
    start, end = flt.index_range
    return isinstance(index, int) and start <= index < end


def keeps(record: TraceRecord, flt: ListingFilter) -> bool:
    """Whether `flt` keeps this op, kernel or region record."""
    if not _in_range(record, flt):
        return False
    if record.get("t") == REGION:
        return not flt.selects_ops
    if flt.op is not None and not any(flt.op in name for name in _names_of(record)):
        return False
    if flt.module is not None and not any(_in_module(m, flt.module) for m in _modules_of(record)):
        return False
    return not flt.nan_only or _has_nonfinite_output(record)


# -- the listing -----------------------------------------------------------------------


def header_lines(trace: Trace, flt: ListingFilter) -> list[str]:
    """Short summary of the run that made the trace."""
    h = trace.header
    command = h.get("command")
    command_text = shlex.join(str(c) for c in command) if isinstance(command, list) else str(command)
    run = f"  backend {h.get('backend', '?')}  torch {h.get('torch', '?')}  device {h.get('device', '?')}"
    run += f"  seed {h.get('seed')}"
    if (h.get("world_size") or 1) > 1:
        run += f"  rank {h.get('rank')}/{h.get('world_size')}"
    lines = [f"trace {trace.path}", run, f"  command {command_text or '?'}"]
    if flt.active:
        lines.append(f"  showing {flt.describe()}")
    return lines


@dataclass
class _Listing:
    """State of one listing pass: where the last shown line was, and counts."""

    flt: ListingFilter
    regions: list[tuple[int, TraceRecord]] = field(default_factory=list)  # (serial, enter record), innermost last
    shown_region: int | None = None  # serial of the region whose line was shown last; None: outside all
    shown_module: tuple[str | None] | None = None  # 1-tuple so that "no module" differs from "not shown"
    shown_src: str | None = None
    ops: int = 0
    kernels: int = 0
    region_calls: int = 0
    kept: int = 0  # ops and kernels shown
    kept_regions: int = 0  # region lines shown (not as context)
    records: int = 0

    def _indent(self, extra: int = 0) -> str:
        return "  " * (len(self.regions) + extra)

    def _reset_context(self) -> None:
        self.shown_module = None
        self.shown_src = None

    def region(self, record: TraceRecord) -> Iterator[str]:
        """A region enter/exit record; shown on its own only when no op filter hides it."""
        entering = record.get("ev") != "exit"
        if entering:
            self.region_calls += 1  # also the serial of this region call
        elif self.regions:
            self.regions.pop()
        if keeps(record, self.flt):
            self.kept_regions += 1
            yield self._indent() + format_region(record)
            self.shown_region = self.region_calls if entering else _LEFT_REGION
            self._reset_context()
        if entering:
            self.regions.append((self.region_calls, record))

    def computation(self, record: TraceRecord) -> Iterator[str]:
        """An op or kernel record, with the context lines it needs first."""
        if record.get("t") == KERNEL:
            self.kernels += 1
        else:
            self.ops += 1
        if not keeps(record, self.flt):
            return
        self.kept += 1
        yield from self._region_context()
        yield from self._module_context(record)
        module_depth = _module_depth(record.get("m"))
        line = format_kernel(record) if record.get("t") == KERNEL else format_op(record)
        yield self._indent(module_depth + 2) + line

    def _region_context(self) -> Iterator[str]:
        serial, enter = self.regions[-1] if self.regions else (None, None)
        if serial == self.shown_region:
            return
        self.shown_region = serial
        self._reset_context()
        if enter is not None:
            yield self._indent(-1) + format_region(enter)

    def _module_context(self, record: TraceRecord) -> Iterator[str]:
        module = record.get("m")
        depth = _module_depth(module)
        if self.shown_module != (module,):
            self.shown_module = (module,)
            self.shown_src = None
            yield self._indent(depth) + f"[{module or _TOP_LEVEL}]"
        src = _source_of(record)
        if src != self.shown_src:
            self.shown_src = src
            if src is not None:
                code = record.get("code")
                yield self._indent(depth + 1) + (f"{src}  {code}" if code else src)

    def summary(self) -> str:
        parts = [f"{self.ops} ops"]
        if self.flt.active:
            parts[0] += f" ({self.kept} shown)"
        if self.kernels:
            parts.append(f"{self.kernels} kernels")
        parts.append(f"{self.region_calls} regions")
        return ", ".join(parts)


def _module_depth(module: str | None) -> int:
    return module.count(".") if module else 0


def _source_of(record: TraceRecord) -> str | None:
    if record.get("t") == KERNEL:
        sources = _unique(str(f.get("src")) for f in record.get("fuses") or [] if f.get("src"))
        return sources[0] if len(sources) == 1 else None
    src = record.get("src")
    return str(src) if src else None


def _footer_line(trace: Trace, listing: _Listing) -> str:
    error = trace.failed
    if error:
        message = next(iter(str(error.get("message") or "").strip().splitlines()), "")
        status = f"script raised {error.get('type', 'an exception')}" + (f": {message}" if message else "")
    else:
        status = "complete"
    return f"{listing.summary()}; {status}"


def _truncated_line(trace: Trace, listing: _Listing) -> str:
    last_line = trace.truncated_at if trace.truncated_at is not None else listing.records + 1
    return (
        f"TRUNCATED: trace ends at line {last_line} without a footer "
        "(the recorded run crashed or was killed); showing what is there"
    )


def render_listing(trace: Trace, flt: ListingFilter, *, max_lines: int | None = None) -> Iterator[str]:
    """Lines of the listing of `trace` (an unread `Trace`), filtered by `flt`.

    max_lines caps the listing lines between header and footer; past it, or past
    the end of `flt.index_range`, reading stops and a last line says so (the
    footer of the file is then not read).
    """
    yield from header_lines(trace, flt)
    listing = _Listing(flt)
    body = 0
    stop_at = flt.index_range[1] if flt.index_range is not None else None
    for record in trace:
        listing.records += 1
        index = record.get("i")
        if stop_at is not None and isinstance(index, int) and index >= stop_at:
            yield from _nothing_kept(listing, flt)
            yield f"(stopped reading at record {index}, the end of the range; the rest of the trace was not read)"
            return
        for line in _record_lines(listing, record):
            if max_lines is not None and body >= max_lines:
                yield f"... stopped after {max_lines} lines; narrow it down with filters or a range"
                return
            body += 1
            yield line
    yield from _nothing_kept(listing, flt)
    if trace.truncated:
        yield f"{listing.summary()}; no footer"
        yield _truncated_line(trace, listing)
    else:
        yield _footer_line(trace, listing)


def _record_lines(listing: _Listing, record: TraceRecord) -> Iterable[str]:
    kind = record.get("t")
    if kind == REGION:
        return listing.region(record)
    if kind in (OP, KERNEL):
        return listing.computation(record)
    return ()  # a record type this version does not list


def _nothing_kept(listing: _Listing, flt: ListingFilter) -> Iterator[str]:
    if listing.kept or listing.kept_regions:
        return
    if flt.active:
        yield f"no records match the filters ({flt.describe()})"
    elif not listing.ops and not listing.kernels:
        yield "no ops recorded"
