"""The drift of a run of many steps, for the HTML report: both runs' outputs step by step, and each judged call's
own error, as two plots.

`read_drift` reads the traces (the light mode's compiled-calls traces where the run has them: every step is
in them); `drift_section` draws what it read, pure. A compiled region's call is a step in a training loop; each
run's output per step is the region's first output, its value where it is one number (a loss), else its root
mean square. The judged calls' error is each call's largest distance from float64 relative to the value's
size, for the compiled code and for eager on the same inputs: a compiler bug shows as a compiled point far
above eager's, drift as two runs whose outputs part while both errors stay together.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from pathlib import Path
from typing import Any

from tracediff.errors import TraceFormatError
from tracediff.report.svg import ticks
from tracediff.trace.reader import Trace
from tracediff.trace.schema import REGION, CheckRecord, Fingerprint

# Fewer steps than this are no drift to draw (the alignment plot shows a short run better).
MIN_STEPS = 3
_W, _H = 1300, 210
_L, _R, _T, _B = 72, 16, 22, 40
_COLOURS = ("#3b6fd4", "#e07b00", "#7a8394")


def read_drift(report: dict[str, Any]) -> dict[str, Any] | None:
    """The series to draw, or None where the run has too few steps or its traces cannot be read."""
    light = report.get("light") or {}
    traces = light.get("traces") or report.get("traces") or []
    if len(traces) != 2:
        return None
    try:
        outputs = [_region_outputs(Path(t)) for t in traces]
    except (OSError, TraceFormatError):
        return None
    (a, checks_a), (b, checks_b) = outputs
    region = _busiest(a)
    if region is None or len(a[region]) < MIN_STEPS:
        return None
    first = (report.get("same_inputs") or {}).get("first_wrong") or {}
    wrong_at = (first.get("region_call") or {}).get("call")
    return {"region": region, "measure": _measure_name(a[region]),
            "a": [(call, y) for call, y, _ in a[region]], "b": [(call, y) for call, y, _ in b.get(region, [])],
            "checks": _check_errors(checks_b or checks_a), "wrong_at": wrong_at,
            "backends": [str(r.get("backend") or label) for r, label in zip(report.get("runs") or [{}, {}], "AB")]}


def _region_outputs(path: Path) -> tuple[dict[str, list[tuple[int, float, bool]]], list[CheckRecord]]:
    """Each region's calls: (call, the first output's value or rms, whether that is a single value); the checks."""
    trace = Trace(path)
    series: dict[str, list[tuple[int, float, bool]]] = {}
    for record in trace:
        if record.get("t") != REGION or record.get("ev") != "exit" or not record.get("out"):
            continue
        value = _summary(record["out"][0].get("fp"))
        if value is not None:
            series.setdefault(str(record.get("name")), []).append((int(record.get("call") or 0), *value))
    return series, trace.checks


def _summary(fp: Fingerprint | None) -> tuple[float, bool] | None:
    """A fingerprint as one number: the value of a one-element tensor, else its root mean square."""
    if not fp or not fp.get("n"):
        return None
    if fp["n"] == 1:
        return float(fp.get("sum", math.nan)), True
    return float(fp.get("l2", math.nan)) / math.sqrt(fp["n"]), False


def _busiest(series: dict[str, list[tuple[int, float, bool]]]) -> str | None:
    counts = Counter({name: len(calls) for name, calls in series.items()})
    return counts.most_common(1)[0][0] if counts else None


def _measure_name(calls: list[tuple[int, float, bool]]) -> str:
    return "value" if all(single for _, _, single in calls) else "root mean square"


def _check_errors(checks: list[CheckRecord]) -> list[dict[str, Any]]:
    """Per step (the region call the judged calls ran in): the compiled and eager errors from float64, relative to
    the value's size, of the output furthest from float64 in the compiled code over that step's judged calls
    (forward and backward), eager's for that same output beside it."""
    by_step: dict[int, dict[str, Any]] = {}
    for check in checks:
        if check.get("unjudged") or not check.get("outs") or not check.get("rc"):
            continue
        step = int(check["rc"][1])
        for out in check["outs"]:
            scale = out.get("size") or out.get("scale") or 0.0
            if not scale or out.get("problem"):
                continue
            point = {"step": step, "c": float(out.get("err_c") or 0.0) / scale,
                     "e": float(out.get("err_e") or 0.0) / scale}
            if step not in by_step or point["c"] > by_step[step]["c"]:
                by_step[step] = point
    return [by_step[step] for step in sorted(by_step)]


# ---- drawing ------------------------------------------------------------------------------------------

def drift_section(drift: dict[str, Any]) -> str:
    """Two inline SVG plots over the steps: the runs' outputs, and the judged calls' own errors."""
    a, b = drift["a"], drift["b"]
    steps = max([x for x, _ in a + b] + [c["step"] for c in drift["checks"]] + [1])
    ys = [y for _, y in a + b if math.isfinite(y)]
    outputs = _plot("drift-plot", steps, [(drift["backends"][0], a), (drift["backends"][1], b)],
                    f"{drift['region']} output ({drift['measure']})", log=False, ys=ys,
                    marker=drift.get("wrong_at"))
    checks = drift["checks"]
    compiled = [(c["step"], c["c"]) for c in checks]
    eager = [(c["step"], c["e"]) for c in checks]
    apart = _apart(a, b)
    errors = _plot("local-error-plot", steps, [("compiled call, on its own inputs", compiled),
                                              ("eager, on the same inputs", eager), ("the two runs apart", apart)],
                   "relative error", log=True, ys=[y for _, y in compiled + eager + apart if y > 0],
                   marker=drift.get("wrong_at"))
    caption = (f"Top: each run's output of {drift['region']} per call (one call per step in a training loop). "
               "Bottom (log scale): per step, the judged calls' own error, the distance from float64 relative to the "
               "value's size of the output the compiled code got furthest from it, beside eager's for that output on "
               "the very same inputs; and how far apart the two runs' outputs are, relative to their size. Runs that part while both errors stay together drift by "
               "rounding; a compiled point far above eager's is the compiler's.")
    if drift.get("wrong_at") is not None:
        caption += f" The dashed line marks the first wrong call (call {drift['wrong_at']})."
    return (f"<section><h2>Drift over {len(a)} steps</h2>{outputs}{errors}"
            f'<p class="note">{html.escape(caption)}</p></section>')


def _apart(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """|B - A| / |A| per call both runs made."""
    by_call = dict(a)
    return [(x, abs(y - by_call[x]) / abs(by_call[x])) for x, y in b
            if x in by_call and by_call[x] and math.isfinite(y) and math.isfinite(by_call[x])]


def _plot(plot_id: str, steps: int, series: list[tuple[str, list[tuple[int, float]]]], y_label: str, log: bool,
          ys: list[float], marker: int | None) -> str:
    lo, hi = _range(ys, log)
    inner_w, inner_h = _W - _L - _R, _H - _T - _B

    def sx(x: float) -> float:
        return _L + inner_w * x / max(steps, 1)

    def sy(y: float) -> float:
        v = math.log10(max(y, 10.0 ** lo)) if log else y
        v = min(max(v, lo), hi)
        return _T + inner_h * (hi - v) / (hi - lo)

    out = [f'<svg id="{plot_id}" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" '
           f'aria-label="{html.escape(y_label)} per step">',
           f'<rect x="{_L}" y="{_T}" width="{inner_w}" height="{inner_h}" fill="#fafbfd" stroke="#d9dee7"/>']
    for tick in _y_ticks(lo, hi, log):
        y = sy(10.0 ** tick if log else tick)
        label = f"1e{tick:.0f}" if log else f"{tick:.4g}"
        out.append(f'<line x1="{_L}" x2="{_L + inner_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eceff4"/>')
        out.append(f'<text x="{_L - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    for x in ticks(steps, 10):
        out.append(f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{_T + inner_h}" y2="{_T + inner_h + 4}" stroke="#9aa3b2"/>')
        out.append(f'<text x="{sx(x):.1f}" y="{_T + inner_h + 16}" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{_L + inner_w / 2:.0f}" y="{_H - 4}" text-anchor="middle">call (step) - '
               f'{html.escape(y_label)}</text>')
    if marker is not None:
        mx = sx(marker)
        out.append(f'<line class="wrong-call" x1="{mx:.1f}" x2="{mx:.1f}" y1="{_T}" y2="{_T + inner_h}" stroke="#c62828" '
                   'stroke-width="2" stroke-dasharray="4 3"/>')
    for (name, points), colour, offset in zip(series, _COLOURS, (0, 14, 28)):
        finite = [(x, y) for x, y in sorted(points) if math.isfinite(y) and (y > 0 or not log)]
        if finite:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in finite)
            out.append(f'<polyline class="series" points="{path}" fill="none" stroke="{colour}" stroke-width="1.4"/>')
            if len(finite) <= 400:
                out.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.2" fill="{colour}">'
                           f"<title>{html.escape(name)}, call {x}: {y:.6g}</title></circle>" for x, y in finite)
        out.append(f'<text x="{_L + 8}" y="{_T + 14 + offset}" style="fill:{colour}">{html.escape(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def _range(ys: list[float], log: bool) -> tuple[float, float]:
    if log:
        logs = [math.log10(y) for y in ys if y > 0]
        bottom, top = (math.floor(min(logs)), math.ceil(max(logs))) if logs else (-8, 0)
        return (bottom, top) if top > bottom else (bottom - 1, top + 1)
    if not ys:
        return 0.0, 1.0
    lo, hi = min(ys), max(ys)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    return lo - pad, hi + pad


def _y_ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        step = 1 if hi - lo <= 10 else 2
        return [float(d) for d in range(int(lo), int(hi) + 1, step)]
    return [lo + (hi - lo) * i / 4 for i in range(5)]
