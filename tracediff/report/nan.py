"""`tracediff nan TRACE [TRACE_B]`: where NaN/Inf first appear, as a report dict and as text.

Exit code 1 when NaN/Inf appear in any trace (made by an op from finite
inputs, or read from outside the recording), 0 when none do: usable as a CI
check that a run stays finite.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracediff.diff.nan_origin import NanScan, scan
from tracediff.errors import ExitCode
from tracediff.report.text import describe_nan_origin


def nan_report(paths: Sequence[str | Path]) -> dict[str, Any]:
    scans: list[NanScan] = [scan(p) for p in paths]
    labels = "ab"[: len(scans)]
    found = any(s.found for s in scans)
    report: dict[str, Any] = {
        "exit_code": int(ExitCode.DIVERGED if found else ExitCode.MATCH),
        "traces": [str(p) for p in paths],
        "nan_origin": {label: (s.origin.as_dict() if s.origin else None) for label, s in zip(labels, scans)},
        "entered": {label: (s.entered.as_dict() if s.entered else None) for label, s in zip(labels, scans)},
        "records_read": {label: s.records for label, s in zip(labels, scans)},
        # No footer: the writer was killed. What was read is answered; the rest is unknown.
        "truncated": {label: s.truncated for label, s in zip(labels, scans)},
    }
    if len(scans) == 2 and scans[0].origin and scans[1].origin:
        report["same_source"] = _same_place(scans[0].origin.as_dict(), scans[1].origin.as_dict())
    return report


def _sources(origin: dict[str, Any]) -> set[str | None]:
    """The source lines an origin may stand for: its own, or each op a kernel fuses."""
    return {f.get("source") for f in origin["fuses"]} if origin.get("fuses") else {origin.get("source")}


def _same_place(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Do both runs first make NaN/Inf at the same source line (or a kernel fusing it)?"""
    return bool(_sources(a) & _sources(b) - {None})


def render_nan(report: dict[str, Any]) -> str:
    lines: list[str] = []
    for label, path in zip("ab", report["traces"]):
        prefix = f"{label.upper()} " if len(report["traces"]) > 1 else ""
        origin = report["nan_origin"][label]
        entered = report["entered"][label]
        lines.append(f"{prefix}{path}:")
        truncated = (report.get("truncated") or {}).get(label)
        if truncated:
            lines.append("  the trace is truncated (no footer: the run crashed or was killed): "
                         "what it does not hold is unknown, so this answer may be incomplete")
        if entered and (origin is None or entered["index"] < origin["index"]):
            lines.append(f"  NaN/Inf come from outside the recording: {entered['op']} at {entered.get('source')} "
                         f"(#{entered['index']}) reads them, and no recorded op made them (input data, a checkpoint?)")
        if origin:
            head, *rest = describe_nan_origin(origin)
            lines.append(f"  first NaN/Inf made from finite inputs: {head}")
            lines += [f"    {line}" for line in rest]
            for t in origin.get("inputs") or []:
                lines.append(f"    input {t['arg']!r} {t['dtype']}{t['shape']}: finite, max |x| {t.get('max'):.4g}")
        elif not entered:
            where = "in the records read" if truncated else f"({report['records_read'][label]} records read)"
            lines.append(f"  no NaN or Inf: no op made one {where}")
    if "same_source" in report:
        origins = report["nan_origin"]
        lines.append("both runs first make NaN/Inf at the same source line (or in a kernel fusing it)"
                     if report["same_source"] else
                     f"the runs first make NaN/Inf at different places: A at {origins['a']['source']}, "
                     f"B at {origins['b']['source']}")
    return "\n".join(lines) + "\n"
