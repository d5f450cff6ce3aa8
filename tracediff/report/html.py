"""Render a report as one self-contained HTML page. Pure: dicts in, str out.

Inputs are the report dict (`Outcome.to_json`, the JSON contract) and the plain-data
form of an `AlignmentSample` (diff/sample.py): the aligned rows around the
divergence and a downsampled relative-difference series over the program.
The page has no external resources (inline CSS, SVG and a little JS, which
only adds conveniences: the page reads fully without it). Every string that
comes from a trace (op names, module paths, source lines of user code) is
escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from typing import Any

from tracediff.diff.sample import AGREE, DIFFER, ONLY_A, ONLY_B, UNCHECKED
from tracediff.report.drift import drift_section
from tracediff.report.svg import ticks
from tracediff.report.text import narrowing_outcome

# The divergent row's background: tests look for this colour in a screenshot,
# so nothing else on the page may use it.
HIGHLIGHT = "#ffc400"

_MAX_CANDIDATES = 20
_OPEN_ALL_BELOW = 300  # rows: below this, every module group starts expanded

_STATUS_LABEL = {
    AGREE: "agree",
    DIFFER: "differ",
    UNCHECKED: "not compared",
    ONLY_A: "only in A",
    ONLY_B: "only in B",
}

_CSS = """
:root { --fg: #1d2330; --muted: #5b6475; --line: #d9dee7; --bg: #f6f7fa; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); }
main { max-width: 1360px; margin: 0 auto; padding: 16px 20px 40px; }
h1 { font-size: 20px; margin: 0 12px 0 0; display: inline-block; vertical-align: middle; }
h2 { font-size: 16px; margin: 0 0 8px; }
code, .mono { font: 12.5px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 12px 16px; margin-top: 12px; }
.badge { display: inline-block; padding: 3px 10px; border-radius: 12px; color: #fff; font-weight: 600;
         vertical-align: middle; letter-spacing: .03em; }
.badge.match { background: #2e7d32; } .badge.diverged { background: #c62828; } .badge.failed { background: #6a1b9a; }
table.meta { border-collapse: collapse; margin-top: 8px; }
table.meta th { text-align: left; color: var(--muted); font-weight: 500; padding: 1px 12px 1px 0; }
table.meta td { padding: 1px 16px 1px 0; }
.counts { color: var(--muted); margin-top: 6px; }
.card { border-left: 5px solid #c62828; }
.card.failed { border-left-color: #6a1b9a; }
.card .where { font-size: 15px; }
.cols { display: grid; grid-template-columns: minmax(0, 1fr) auto; gap: 24px; }
.card h2 { margin-bottom: 4px; }
.card pre { background: #f1f3f7; padding: 6px 10px; border-radius: 4px; margin: 6px 0; white-space: pre-wrap; }
.fp { border-collapse: collapse; margin: 6px 0; }
.fp th, .fp td { padding: 2px 10px; border-bottom: 1px solid var(--line); text-align: right; }
.fp th:first-child, .fp td:first-child { text-align: left; }
.note { color: var(--muted); }
ul.plain { margin: 4px 0; padding-left: 20px; }
svg { display: block; max-width: 100%; height: auto; }
svg text { font: 11px system-ui, sans-serif; fill: #5b6475; }
.toolbar { margin-bottom: 8px; }
.toolbar button { font: inherit; padding: 2px 10px; margin-right: 6px; border: 1px solid var(--line);
                  background: #fff; border-radius: 4px; cursor: pointer; }
details.group { border: 1px solid var(--line); border-radius: 4px; margin: 4px 0; }
details.group > summary { cursor: pointer; padding: 4px 8px; background: #eef1f6; }
details.group > summary .mod { font-weight: 600; }
details.group.has-diff > summary { background: #fbe3e3; }
table.rows { width: 100%; border-collapse: collapse; table-layout: fixed; }
table.rows th { text-align: left; font-weight: 500; color: var(--muted); border-bottom: 1px solid var(--line);
                padding: 2px 6px; }
table.rows td { padding: 2px 6px; border-bottom: 1px solid #eef0f4; overflow: hidden; text-overflow: ellipsis;
                white-space: nowrap; }
table.rows col.idx { width: 56px; } table.rows col.op { width: 20%; } table.rows col.rel { width: 92px; }
table.rows col.st { width: 156px; } table.rows col.src { width: 17%; }
tr.differ { background: #fde7e7; }
tr.only_a td, tr.only_b td { color: #6b7280; font-style: italic; }
tr.only_a, tr.only_b { background: #f3f4f7; }
tr.unchecked td { color: #6b7280; }
tr.candidate { background: #fff1c2; }
tr.observed { outline: 2px solid #c62828; outline-offset: -2px; }
tr.first { background: HIGHLIGHT; font-weight: 600; }
tr.first td { white-space: normal; }
.opdiff { color: #b42318; }
body.only-diff tr.agree, body.only-diff tr.unchecked { display: none; }
.omitted { color: var(--muted); font-style: italic; }
""".replace("HIGHLIGHT", HIGHLIGHT)

# Conveniences only: expand/collapse, a filter, and a jump to the divergent row.
_JS = """
(function () {
  var body = document.body;
  function groups() { return document.querySelectorAll('details.group'); }
  function act(name) {
    if (name === 'expand') groups().forEach(function (g) { g.open = true; });
    if (name === 'collapse') groups().forEach(function (g) { g.open = false; });
    if (name === 'only-diff') body.classList.toggle('only-diff');
    if (name === 'jump') {
      var row = document.getElementById('divergent');
      if (!row) return;
      var group = row.closest('details');
      if (group) group.open = true;
      row.scrollIntoView({block: 'center'});
    }
  }
  document.querySelectorAll('button[data-action]').forEach(function (b) {
    b.addEventListener('click', function () { act(b.getAttribute('data-action')); });
  });
  var shown = document.querySelectorAll('table.rows tbody tr').length;
  var counter = document.getElementById('rows-shown');
  if (counter) counter.textContent = String(shown);
  body.setAttribute('data-ready', '1');
})();
"""


def _e(x: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape("" if x is None else str(x), quote=True)


def _rel(x: float | None) -> str:
    if x is None:
        return "—"
    if math.isinf(x) or math.isnan(x):
        return "∞"
    return "0" if x == 0 else f"{x:.3g}"


def _backends(report: dict[str, Any], sample: dict[str, Any] | None) -> list[str]:
    names = [r.get("backend") for r in report.get("runs", [])]
    if sample and not any(names):
        names = [h.get("backend") for h in sample.get("headers", [])]
    return [str(n) if n else label for n, label in zip([*names, None, None][:2], "AB")]


def render_html(report: dict[str, Any], sample: dict[str, Any] | None = None,
                drift: dict[str, Any] | None = None) -> str:
    """The whole page. `sample` is `AlignmentSample.as_dict()`, or None when no diff ran; `drift` is
    `report.drift.read_drift`'s series of a run of many steps, or None."""
    backends = _backends(report, sample)
    title = f"tracediff: {backends[0]} vs {backends[1]} ({report['verdict']})"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style></head>",
        f'<body data-verdict="{_e(report["verdict"])}"><main>',
        _header(report, sample, backends),
        _summary(report),
    ]
    if drift is not None:
        parts.append(drift_section(drift))
    if sample is not None:
        parts.append(_plot_section(report, sample))
        parts.append(_table_section(report, sample))
    parts.append(_details(report))
    parts.append(f"<script>{_JS}</script></main></body></html>")
    return "\n".join(p for p in parts if p) + "\n"


def _header(report: dict[str, Any], sample: dict[str, Any] | None, backends: list[str]) -> str:
    verdict = report["verdict"]
    headers = (sample or {}).get("headers") or [{}, {}]
    rows = []
    for label, path, backend, header in zip("AB", [*report.get("traces", []), "", ""], backends, headers):
        details = ", ".join(f"{k} {v}" for k, v in (("torch", header.get("torch")), ("device", header.get("device")))
                            if v)
        command = " ".join(str(c) for c in header.get("command") or [])
        rows.append(f"<tr><th>{label}</th><td><b>{_e(backend)}</b></td><td class=mono>{_e(path)}</td>"
                    f"<td>{_e(details)}</td><td class=mono>{_e(command)}</td></tr>")
    counts = []
    if "compared" in report:
        unpaired = report.get("unpaired") or {}
        counts.append(f"{report['compared']} paired records compared, {unpaired.get('a', 0)} only in A, "
                      f"{unpaired.get('b', 0)} only in B")
    if report.get("inherited"):
        more = "" if report.get("inherited_complete", True) else " or more"
        counts.append(f"{report['inherited']}{more} later records differ too (inherited)")
    return (f'<header><section><h1>tracediff: {_e(backends[0])} vs {_e(backends[1])}</h1>'
            f'<span class="badge {_e(verdict)}">{_e(verdict.upper())}</span>'
            f'<table class="meta">{"".join(rows)}</table>'
            f'<div class="counts">{_e("; ".join(counts))}</div></section></header>')


def _summary(report: dict[str, Any]) -> str:
    """The divergence card (or the failure, or the match)."""
    first = report.get("first_divergence")
    lines: list[str] = []
    if first:
        lines.append(_divergence_card(first))
    elif report["verdict"] == "failed":
        failures = [f"run {label}: {r['failure']}" for label, r in zip("AB", report.get("runs", [])) if r.get("failure")]
        lines.append('<section class="card failed"><h2>A run failed</h2><ul class=plain>'
                     + "".join(f"<li>{_e(f)}</li>" for f in failures) + "</ul>"
                     + (f"<p>no divergence in the {_e(report['compared'])} records compared before the failure</p>"
                        if "compared" in report else "") + "</section>")
    else:
        lines.append(f"<section><h2>No divergence</h2><p>{_e(report.get('compared', 0))} paired records agree "
                     "within tolerance.</p></section>")
    return "\n".join(lines)


def _details(report: dict[str, Any]) -> str:
    """NaN origins, structure differences, header differences, notes."""
    extra = []
    nan = report.get("nan_origin") or {}
    for label in ("a", "b"):
        place = nan.get(label)
        if place:
            extra.append(f"first NaN/Inf in {label.upper()}: {place['op']} at {place['source']} "
                         f"[{place['module']}] (#{place['index']})")
    structure = report.get("structure") or {}
    if structure.get("count"):
        extra.append(f"structure: {structure['count']} record(s) on one side only")
        extra += list(structure.get("examples") or [])
    extra += [f"header: {d}" for d in report.get("header_differences") or []]
    extra += [f"note: {n}" for n in report.get("notes") or []]
    if not extra:
        return ""
    return '<section><h2>Details</h2><ul class="plain note">' + "".join(f"<li>{_e(x)}</li>" for x in extra) + "</ul></section>"


def _divergence_card(first: dict[str, Any]) -> str:
    module = f' in module <code>{_e(first["module"])}</code>' if first.get("module") else ""
    out = ['<section class="card" id="first-divergence"><div class="cols"><div>'
           f'<h2>First divergence <span class=note>({_e(first["kind"])})</span></h2>',
           f'<div class="where"><code>{_e(first["op"])}</code> (#{_e(first["index"])}) at '
           f'<code>{_e(first.get("source"))}</code>{module}'
           f' &middot; rel diff <b>{_rel(first.get("rel_diff"))}</b></div>']
    if first.get("code"):
        out.append(f"<pre>{_e(first['code'])}</pre>")
    observed = first.get("observed")
    if observed and observed.get("index") != first["index"]:
        out.append(f"<div>seen at <code>{_e(observed['op'])}</code> (#{_e(observed['index'])}) at "
                   f"<code>{_e(observed.get('source'))}</code></div>")
    b = first.get("b")
    if b and b.get("op") != (observed or first)["op"]:
        out.append(f"<div>B ran <code>{_e(b['op'])}</code> there (#{_e(b['index'])})</div>")
    tensor = first.get("tensor")
    if tensor:
        shape = "[" + ", ".join(str(s) for s in tensor["shape"]) + "]"
        out.append(f"<div>{_e(tensor['side'])} <code>{_e(tensor['arg'])}</code> {_e(tensor['dtype'])}{_e(shape)}: "
                   f"{_e(tensor['comparison'])}</div>")
    out.append(f'<div class="note">{_e(first.get("note"))}</div>')
    candidates = first.get("candidates") or []
    if len(candidates) > 1:
        out.append(f"<div>candidates ({len(candidates)}):</div><ul class=plain>")
        out += [f"<li>#{_e(c['index'])} <code>{_e(c['op'])}</code> at {_e(c.get('source'))} "
                f"[{_e(c.get('module'))}]</li>" for c in candidates[:_MAX_CANDIDATES]]
        if len(candidates) > _MAX_CANDIDATES:
            out.append(f"<li class=omitted>{len(candidates) - _MAX_CANDIDATES} more not shown</li>")
        out.append("</ul>")
    narrowing = first.get("narrowing")
    if narrowing:
        out.append(f"<div class=note>narrowing ({_e(narrowing_outcome(narrowing))}): {_e(narrowing.get('method'))}</div>")
    out.append('</div><div>')
    if tensor:
        out.append("<div class=note>fingerprints of the differing tensor</div>")
        out.append(_fingerprints(tensor.get("fingerprint_a") or {}, tensor.get("fingerprint_b") or {}))
    out.append('<div class="toolbar" style="margin-top:8px"><button data-action="jump">jump to the row</button></div>')
    out.append("</div></div></section>")
    return "\n".join(out)


def _fingerprints(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = [k for k in ("sum", "l1", "l2", "max", "nan", "inf", "n") if k in a or k in b]
    head = "".join(f"<th>{_e(k)}</th>" for k in keys)

    def cells(fp: dict[str, Any]) -> str:
        return "".join(f"<td class=mono>{_e(_num(fp.get(k)))}</td>" for k in keys)

    return (f'<table class="fp"><tr><th></th>{head}</tr><tr><td>A</td>{cells(a)}</tr>'
            f"<tr><td>B</td>{cells(b)}</tr></table>")


def _num(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else ("" if x is None else str(x))


# ---- the plot -----------------------------------------------------------------------------------

_W, _H = 1300, 230
_L, _R, _T, _B = 64, 16, 22, 40
_DENSE_POINTS = 300


def _plot_section(report: dict[str, Any], sample: dict[str, Any]) -> str:
    series = sample["series"]
    points = series["points"]
    if not points:
        return "<section><h2>Relative difference along the program</h2><p class=note>no paired records were compared</p></section>"
    first = report.get("first_divergence")
    tol = (report.get("tolerances") or {}).get("float32")
    svg = plot_svg(points, series["x_max"], first.get("index") if first else None,
                   first.get("op") if first else None, tol["rtol"] if tol else None)
    caption = [f"{series['compared']} pairs with compared outputs; each point is the largest relative difference of a pair's "
               "outputs (log scale; exact agreement is drawn on the bottom line, NaN/Inf mismatches on the top)."]
    if series["bucket_width"] > 1:
        caption.append(f"Downsampled: each point is the largest difference in a bucket of {series['bucket_width']} "
                       "op indices.")
    if sample.get("stopped_early"):
        caption.append("The diff stopped reading after too many inherited differences: the plot ends there.")
    return ("<section><h2>Relative difference along the program</h2>" + svg
            + f'<p class="note">{_e(" ".join(caption))}</p></section>')


def plot_svg(points: list[tuple[int, float]], x_max: int, first_index: int | None, first_op: str | None,
             rtol: float | None) -> str:
    """An inline SVG: relative difference (log10) against op index in A, the first divergence marked."""
    finite = [y for _, y in points if y > 0 and math.isfinite(y)]
    lo = math.floor(math.log10(min(finite))) if finite else -8
    hi = math.ceil(math.log10(max(finite))) if finite else 0
    if rtol:
        lo, hi = min(lo, math.floor(math.log10(rtol))), max(hi, math.ceil(math.log10(rtol)))
    lo, hi = max(min(lo, -2), -18), min(max(hi, 0), 18)
    if hi - lo < 3:
        lo = hi - 3
    inner_w, inner_h = _W - _L - _R, _H - _T - _B
    band = 18  # px for the "0" and "NaN/Inf" lines outside the log range
    span_x = max(x_max, 1)

    def sx(x: float) -> float:
        return _L + inner_w * x / span_x

    def sy(y: float) -> float:
        if y == 0:
            return _T + inner_h
        if not math.isfinite(y):
            return _T
        v = min(max(math.log10(y), lo), hi)
        return _T + band + (inner_h - 2 * band) * (hi - v) / (hi - lo)

    out = [f'<svg id="reldiff-plot" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" '
           'aria-label="relative difference against op index">',
           f'<rect x="{_L}" y="{_T}" width="{inner_w}" height="{inner_h}" fill="#fafbfd" stroke="#d9dee7"/>']
    step = 1 if hi - lo <= 10 else 2
    for d in range(lo, hi + 1, step):
        y = sy(10.0 ** d)
        out.append(f'<line x1="{_L}" x2="{_L + inner_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eceff4"/>')
        out.append(f'<text x="{_L - 6}" y="{y + 4:.1f}" text-anchor="end">1e{d}</text>')
    out.append(f'<text x="{_L - 6}" y="{sy(0) + 4:.1f}" text-anchor="end">0</text>')
    out.append(f'<text x="{_L - 6}" y="{sy(math.inf) + 4:.1f}" text-anchor="end">∞</text>')
    for x in ticks(span_x):
        out.append(f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{_T + inner_h}" y2="{_T + inner_h + 4}" stroke="#9aa3b2"/>')
        out.append(f'<text x="{sx(x):.1f}" y="{_T + inner_h + 16}" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{_L + inner_w / 2:.0f}" y="{_H - 4}" text-anchor="middle">op index in trace A</text>')
    if rtol:
        y = sy(rtol)
        out.append(f'<line x1="{_L}" x2="{_L + inner_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#8a94a6" '
                   'stroke-dasharray="6 4"/>')
        out.append(f'<text x="{_L + inner_w - 4}" y="{y - 4:.1f}" text-anchor="end">float32 rtol {rtol:g}</text>')
    if first_index is not None and first_index >= 0:
        marker = sx(first_index)
        out.append(f'<line id="divergence-marker" x1="{marker:.1f}" x2="{marker:.1f}" y1="{_T}" y2="{_T + inner_h}" '
                   'stroke="#c62828" stroke-width="2" stroke-dasharray="4 3"/>')
        anchor = "end" if marker > _L + inner_w * 0.7 else "start"
        dx = -6 if anchor == "end" else 6
        out.append(f'<text x="{marker + dx:.1f}" y="{_T + 14}" text-anchor="{anchor}" style="fill:#c62828">'
                   f'first divergence #{first_index} {_e(first_op)}</text>')
    coords = [(sx(x), sy(y), x, y) for x, y in points]
    path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in coords)
    out.append(f'<polyline points="{path}" fill="none" stroke="#3b6fd4" stroke-width="1.2" opacity="0.6"/>')
    dense = len(coords) > _DENSE_POINTS
    for px, py, x, y in coords:
        if dense and y == 0:
            continue  # the line shows exact agreement; thousands of dots on it only blur it
        # Red: above float32's tolerance (per-op tolerances may differ), or at/after the divergence without one.
        high = y > rtol if rtol else first_index is not None and x >= first_index
        colour = "#c62828" if high else "#3b6fd4"
        out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.6" fill="{colour}"><title>#{x}: {_rel(y)}</title></circle>')
    out.append("</svg>")
    return "".join(out)


# ---- the side-by-side table ---------------------------------------------------------------------

def _group_key(row: dict[str, Any]) -> str:
    """A's module (the reference); B's only for rows that are only in B."""
    place = row["a"] or row["b"] or {}
    return str(place.get("module") or "(no module)")


def _groups(rows: list[dict[str, Any]]) -> Iterable[tuple[str, list[dict[str, Any]]]]:
    """Consecutive rows of the same module, in program order."""
    current: list[dict[str, Any]] = []
    key = None
    for row in rows:
        k = _group_key(row)
        if current and k != key:
            yield key or "", current
            current = []
        key = k
        current.append(row)
    if current:
        yield key or "", current


def _table_section(report: dict[str, Any], sample: dict[str, Any]) -> str:
    rows = sample["rows"]
    first = report.get("first_divergence") or {}
    first_index = first.get("index")
    observed = (first.get("observed") or {}).get("index")
    candidates = {c["index"] for c in first.get("candidates") or []}
    divergence_row = sample.get("divergence_row")
    total = sample["total_rows"]
    counts = sample.get("counts") or {}
    out = ["<section><h2>Aligned traces, grouped by module</h2>",
           '<div class="toolbar"><button data-action="expand">expand all</button>'
           '<button data-action="collapse">collapse all</button>'
           '<button data-action="only-diff">only differences</button>'
           + ('<button data-action="jump">jump to the divergence</button>' if first else "") + "</div>",
           f'<p class="note">showing <span id="rows-shown">{len(rows)}</span> of {total} aligned rows: '
           + _e(", ".join(f"{counts.get(k, 0)} {label}" for k, label in _STATUS_LABEL.items())) + "</p>"]
    if not rows:
        out.append('<p class="omitted">no aligned rows</p></section>')
        return "\n".join(out)
    if rows[0]["n"] > 0:
        out.append(f'<p class="omitted">rows 0 to {rows[0]["n"] - 1} omitted (they come before the window '
                   "around the divergence; the plot above covers them)</p>")
    found = any(r["a"] and r["a"]["index"] == first_index for r in rows)
    divergent = sample.get("divergent_row")
    if first and not found and divergent is not None:
        # The rows kept are a window around the traces' own first difference; the divergent op is elsewhere.
        out.append('<details class="group has-diff" open><summary><span class="mod mono">the divergent op</span> '
                   '<span class="note">outside the window of aligned rows below</span></summary>'
                   '<table class="rows"><colgroup><col class="idx"><col class="op"><col class="rel">'
                   '<col class="op"><col class="idx"><col class="st"><col class="src"><col></colgroup><tbody>'
                   + _row(divergent, first_index, observed, candidates, divergence_row) + "</tbody></table></details>")
    elif first and not found:
        out.append(f'<p class="omitted" id="divergent">the divergent op #{_e(first_index)} is outside the rows '
                   "shown</p>")
    open_all = len(rows) < _OPEN_ALL_BELOW
    for module, group in _groups(rows):
        has_diff = any(r["status"] != AGREE for r in group)
        has_first = any(r["a"] and r["a"]["index"] in ({first_index} | candidates) for r in group)
        is_open = open_all or has_first
        n_diff = sum(r["status"] == DIFFER for r in group)
        label = f"{len(group)} rows" + (f", {n_diff} differ" if n_diff else "")
        out.append(f'<details class="group{" has-diff" if has_diff else ""}"{" open" if is_open else ""}>'
                   f'<summary><span class="mod mono">{_e(module)}</span> <span class="note">{_e(label)}</span>'
                   "</summary>")
        out.append('<table class="rows"><colgroup><col class="idx"><col class="op"><col class="rel">'
                   '<col class="op"><col class="idx"><col class="st"><col class="src"><col></colgroup>'
                   "<thead><tr><th>A #</th><th>A op</th><th>rel diff</th><th>B op</th><th>B #</th>"
                   "<th>status</th><th>source</th><th>code</th></tr></thead><tbody>")
        for row in group:
            out.append(_row(row, first_index, observed, candidates, divergence_row))
        out.append("</tbody></table></details>")
    last = rows[-1]["n"]
    if last < total - 1:
        out.append(f'<p class="omitted">rows {last + 1} to {total - 1} omitted (only a window around the '
                   "divergence is kept; the plot above covers them)</p>")
    if sample.get("stopped_early"):
        out.append('<p class="omitted">the diff stopped reading the traces after too many inherited differences; '
                   "later records are not listed</p>")
    out.append("</section>")
    return "\n".join(out)


def _row(row: dict[str, Any], first_index: int | None, observed: int | None, candidates: set[int],
         divergence_row: int | None) -> str:
    a, b = row["a"], row["b"]
    status = row["status"]
    classes = [status]
    a_index = a["index"] if a else None
    row_id = f"row-{row['n']}" if row["n"] is not None else "row-divergent"
    label = _STATUS_LABEL[status]
    if a_index is not None and a_index == first_index:
        classes.append("first")
        row_id = "divergent"
        label = "FIRST DIVERGENCE"
    elif a_index is not None and a_index in candidates:
        classes.append("candidate")
        label = "candidate"
    elif status == DIFFER and divergence_row is not None and row["n"] > divergence_row:
        label = "inherited"
    if a_index is not None and observed is not None and a_index == observed and a_index != first_index:
        classes.append("observed")
        label = "difference seen"
    place = a or b or {}
    op_a, op_b = (a or {}).get("op"), (b or {}).get("op")
    differs = a is not None and b is not None and op_a != op_b
    opdiff = ' class="opdiff"' if differs else ""
    source = place.get("source") or ""
    return (f'<tr id="{row_id}" class="{" ".join(classes)}" data-n="{_e(row["n"])}">'
            f'<td>{_e(a_index if a else "")}</td><td class=mono title="{_e(op_a)}">{_e(op_a or "—")}</td>'
            f'<td class=mono>{_e(_rel(row["rel_diff"]) if status in (AGREE, DIFFER) else "")}</td>'
            f'<td class=mono title="{_e(op_b)}"><span{opdiff}>{_e(op_b or "—")}</span></td>'
            f'<td>{_e(b["index"] if b else "")}</td><td>{_e(label)}</td>'
            f'<td class=mono title="{_e(place.get("path"))}">{_e(source)}</td>'
            f'<td class=mono title="{_e(place.get("code"))}">{_e(place.get("code"))}</td></tr>')
