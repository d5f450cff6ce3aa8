"""The HTML report and its bounded alignment sample, on hand-built traces."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from tests.synth import TraceBuilder
from tracediff.config import Config
from tracediff.diff.decide import decide, unreadable
from tracediff.diff.engine import diff_traces
from tracediff.diff.sample import AGREE, DIFFER, AlignmentSample, Series
from tracediff.report.html import HIGHLIGHT, render_html

X = torch.linspace(-1, 1, 12).reshape(3, 4)
EVIL_SRC = 'evil.py:7'
EVIL_CODE = '<script>alert("pwned")</script> & x = "a" < b'
EVIL_MODULE = 'Net.<img onerror=alert(1)>'


def _chain(builder: TraceBuilder, n_ops: int, wrong_at: int | None, evil_at: int = 5) -> None:
    """A chain of n_ops elementwise ops (sin, cos alternating); at `wrong_at` B computes sin for cos.

    Op `evil_at` carries a source line and module path full of HTML.
    """
    t = builder.tensor
    builder.region("enter", [t("v0", X, "in0")])
    value = X
    for k in range(n_ops):
        cos = bool(k % 2) != (k == wrong_at)
        op, fn = ("aten::cos", torch.cos) if cos else ("aten::sin", torch.sin)
        new = fn(value) + 0.01 * (k + 1)  # the offset keeps every value distinct
        code, module = (EVIL_CODE, EVIL_MODULE) if k == evil_at else (f"v{k + 1} = f(v{k})", f"Net.layer{k // 10}")
        builder.op(op, [t(f"v{k}", value)], [t(f"v{k + 1}", new, "0")], src=EVIL_SRC if k == evil_at else f"m.py:{k}",
                   module=module, code=code)
        value = new
    builder.region("exit", [t(f"v{n_ops}", value, "out0")])


def _page(tmp_path: Path, n_ops: int = 12, wrong_at: int | None = 5, **sample_args: int) -> tuple[dict, dict, str]:
    a, b = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl", "custom")
    _chain(a, n_ops, None)
    _chain(b, n_ops, wrong_at)
    paths = [a.close(), b.close()]
    sample = AlignmentSample(**sample_args)
    report = decide(diff_traces(*paths, Config(), sample=sample), [str(p) for p in paths], Config()).to_json()
    data = sample.as_dict()
    return report, data, render_html(report, data)


def _row(page: str, row_id: str) -> str:
    match = re.search(rf'<tr id="{row_id}"[^>]*>.*?</tr>', page, re.S)
    assert match, f"no row {row_id}"
    return match.group(0)


def test_divergent_row_is_highlighted_with_its_source_line(tmp_path: Path) -> None:
    report, data, page = _page(tmp_path)
    first = report["first_divergence"]
    assert first["op"] == "aten::cos" and first["index"] == 6  # region enter is #0, op k is #k+1
    row = _row(page, "divergent")
    assert 'class="differ first"' in row and "FIRST DIVERGENCE" in row
    assert "aten::cos" in row and "aten::sin" in row and "evil.py:7" in row
    assert page.count('id="divergent"') == 1 and page.count(" first\"") == 1
    assert HIGHLIGHT in page  # the CSS rule behind the screenshot check
    # Later differing rows are labelled as inherited, earlier ones agree.
    assert "inherited" in _row(page, f"row-{data['divergence_row'] + 1}")
    assert ">agree<" in _row(page, "row-1")
    # The plot marks the first divergence.
    assert 'id="divergence-marker"' in page and "first divergence #6" in page


def test_strings_from_traces_are_escaped(tmp_path: Path) -> None:
    _, _, page = _page(tmp_path)
    assert "<script>alert" not in page and "<img onerror" not in page
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt; &amp; x = &quot;a&quot; &lt; b" in page
    assert "Net.&lt;img onerror=alert(1)&gt;" in page
    assert page.count("<script>") == 1  # only the page's own


def test_page_is_self_contained(tmp_path: Path) -> None:
    _, _, page = _page(tmp_path)
    for external in ("http://", "https://", " src=", "<link", "url(", "@import", "//cdn"):
        assert external not in page, external
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<svg" in page and "<style>" in page


def test_rows_are_grouped_by_module(tmp_path: Path) -> None:
    _, _, page = _page(tmp_path, n_ops=25, wrong_at=None)
    summaries = re.findall(r'<summary><span class="mod mono">(.*?)</span>', page)
    # Consecutive runs of one module, in program order: the region enter has no module, op 5 has its own.
    assert summaries == ["(no module)", "Net.layer0", "Net.&lt;img onerror=alert(1)&gt;", "Net.layer0", "Net.layer1",
                         "Net.layer2", "(no module)"]


def test_large_alignment_keeps_a_window_and_says_what_it_omitted(tmp_path: Path) -> None:
    report, data, page = _page(tmp_path, n_ops=400, wrong_at=201, max_rows=100, context=20, max_points=50)
    assert data["total_rows"] == 402
    rows = data["rows"]
    assert len(rows) == 41 and rows[0]["n"] == data["divergence_row"] - 20 and rows[-1]["n"] == data["divergence_row"] + 20
    assert "FIRST DIVERGENCE" in _row(page, "divergent")
    assert f"rows 0 to {rows[0]['n'] - 1} omitted" in page
    assert f"rows {rows[-1]['n'] + 1} to 401 omitted" in page
    assert len(data["series"]["points"]) <= 50 and data["series"]["bucket_width"] > 1
    assert "Downsampled" in page


def test_match_has_no_highlight(tmp_path: Path) -> None:
    report, _, page = _page(tmp_path, wrong_at=None)
    assert report["verdict"] == "match"
    assert 'id="divergent"' not in page and 'id="divergence-marker"' not in page
    assert 'class="badge match"' in page


def test_failed_run_without_traces_renders(tmp_path: Path) -> None:
    report = unreadable(["a.jsonl", "b.jsonl"], [], "run A left no readable trace").to_json()
    page = render_html(report, None)
    assert 'class="badge failed"' in page and "run A left no readable trace" in page


def _fake(i: int) -> dict:
    return {"t": "op", "i": i, "op": "aten::add", "src": f"m.py:{i}", "m": "Net"}


def test_sample_stays_bounded_on_a_long_alignment() -> None:
    sample = AlignmentSample(max_rows=50, context=10, max_points=64)
    for i in range(100_000):
        differs = i >= 60_000
        sample.pair(_fake(i), _fake(i), 0.5 if differs else 1e-7 * (i % 7), DIFFER if differs else AGREE)
        if i == 60_000:
            sample.diverged()
    assert len(sample.head) == 50 and len(sample.before) == 11 and len(sample.after) == 10
    assert len(sample.series.points) <= 64
    rows = sample.as_dict()["rows"]
    assert [r["n"] for r in rows] == list(range(59_990, 60_011))
    assert sample.counts == {AGREE: 60_000, DIFFER: 40_000, "unchecked": 0, "only_a": 0, "only_b": 0}


def test_series_keeps_the_largest_value_per_bucket() -> None:
    series = Series(max_points=8)
    for x in range(1000):
        series.add(x, 1.0 if x == 637 else 1e-9)
    assert len(series.points) <= 8
    peaks = [(x, y) for x, y in series.points if y == 1.0]
    assert len(peaks) == 1 and peaks[0][0] <= 637 < peaks[0][0] + series.width


def test_a_divergent_op_outside_the_rows_kept_still_has_its_row(tmp_path: Path) -> None:
    """A same-input verdict names an op far from the traces' own first difference, outside the window of rows the
    sample kept: the page reads it from trace A and shows it, so the jump buttons land on it (issue 48)."""
    from tracediff.report.files import with_divergent_row

    report, data, _ = _page(tmp_path, n_ops=400, wrong_at=390, context=5, max_rows=20)
    report["first_divergence"]["index"] = 3  # an op of A before the window kept around #390
    assert not any(r["a"] and r["a"]["index"] == 3 for r in data["rows"])
    page = render_html(report, with_divergent_row(report, data))
    row = _row(page, "divergent")
    assert "FIRST DIVERGENCE" in row and "m.py:2" in row
    assert "outside the window of aligned rows" in page
    # Without the traces, the note itself is the jump's target.
    report["traces"] = [str(tmp_path / "gone.jsonl"), str(tmp_path / "gone.jsonl")]
    assert 'id="divergent"' in render_html(report, with_divergent_row(report, data))
