"""--html and --junit from the CLI on the bundled fixtures, and the page in a real headless browser."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, invoke, marker_line
from tests.pngread import read_png
from tracediff.report.html import HIGHLIGHT

WRONG = "wrong_decomposition:wrong_cos_backend"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium); "
                                    ".ci/run installs it where apt-get is available")


@pytest.fixture(scope="module")
def wrong_traces(run_fixture) -> list[str]:
    """The traces of the wrong-decomposition fixture (the run is shared with test_cli)."""
    result = run_fixture("wrong_decomposition.py", f"eager,{WRONG}")
    assert result.exit_code == 1, result.stderr
    return result.report["traces"]


@pytest.fixture(scope="module")
def pages(wrong_traces: list[str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """HTML of the diverged diff and of a matching one (A against itself), plus the JUnit XML."""
    out = tmp_path_factory.mktemp("pages")
    diverged = invoke("diff", *wrong_traces, "--format", "json", "--html", str(out / "diverged.html"),
                      "--junit", str(out / "diverged.xml"))
    assert diverged.exit_code == 1, diverged.stderr  # the files do not change the exit code
    assert diverged.report["first_divergence"]["op"] == "aten::cos"
    match = invoke("diff", wrong_traces[0], wrong_traces[0], "--html", str(out / "match.html"))
    assert match.exit_code == 0, match.stderr
    return {"diverged": out / "diverged.html", "junit": out / "diverged.xml", "match": out / "match.html"}


def test_diff_writes_html_with_the_divergent_line(pages: dict[str, Path]) -> None:
    page = pages["diverged"].read_text(encoding="utf-8")
    line = marker_line("wrong_decomposition.py", "divergent line")
    row = re.search(r'<tr id="divergent"[^>]*>.*?</tr>', page, re.S)
    assert row, "no highlighted row"
    assert "aten::cos" in row.group(0) and "aten::sin" in row.group(0)
    assert f"wrong_decomposition.py:{line}" in row.group(0) and "y = torch.cos(h)" in row.group(0)


def test_diff_writes_junit_failure(pages: dict[str, Path]) -> None:
    root = ET.parse(pages["junit"]).getroot()
    case = root.find("testsuite/testcase")
    failure = case.find("failure")
    line = marker_line("wrong_decomposition.py", "divergent line")
    assert f"aten::cos #6 at wrong_decomposition.py:{line}" in failure.get("message")
    assert case.get("name") == f"eager vs {WRONG}"


def test_run_that_fails_writes_junit_error_and_html(tmp_path: Path) -> None:
    html, junit = tmp_path / "r.html", tmp_path / "r.xml"
    result = invoke("run", str(FIXTURES / "raises_when_compiled.py"), "--backends", "eager,aot_eager",
                    "--out-dir", str(tmp_path / "out"), "--html", str(html), "--junit", str(junit))
    assert result.exit_code == 3, result.stderr
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    assert case.get("classname") == "tracediff.raises_when_compiled"
    error = case.find("error")
    assert error is not None and "raised" in error.get("message") and case.find("failure") is None
    page = html.read_text(encoding="utf-8")
    assert 'class="badge failed"' in page and "A run failed" in page
    assert 'class="agree"' in page  # what matched before the failure is listed


def test_unwritable_html_path_is_a_usage_error_before_running(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    result = invoke("run", str(FIXTURES / "wrong_decomposition.py"), "--backends", f"eager,{WRONG}",
                    "--out-dir", str(tmp_path / "out"), "--html", str(tmp_path / "a-file" / "r.html"))
    assert result.exit_code == 2
    assert "is not a directory" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing ran


def test_an_html_report_inside_the_out_dir_to_be_made_is_written(tmp_path: Path) -> None:
    """`--html out/report.html --out-dir out`: the folder the run makes anyway (issue 48: it was refused)."""
    html = tmp_path / "out" / "report.html"
    result = invoke("run", str(FIXTURES / "wrong_decomposition.py"), "--backends", f"eager,{WRONG}",
                    "--out-dir", str(tmp_path / "out"), "--html", str(html))
    assert result.exit_code == 1, result.stderr
    assert 'class="badge diverged"' in html.read_text(encoding="utf-8")


# ---- in a real browser -------------------------------------------------------------------------

def _chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    # Without the background-networking flags headless chromium can hang on network lookups.
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )


def _screenshot(page: Path, tmp_path: Path) -> list[list[tuple[int, int, int]]]:
    png = tmp_path / f"{page.stem}.png"
    done = _chromium(page, tmp_path / "profile", f"--screenshot={png}", "--window-size=1400,1600",
                     "--hide-scrollbars")
    assert png.is_file(), done.stderr[-2000:]
    return read_png(png)


def _highlight_box(pixels: list[list[tuple[int, int, int]]]) -> tuple[int, tuple[int, int, int, int] | None]:
    """How many pixels have the highlight colour (within 2 per channel), and their bounding box."""
    target = tuple(int(HIGHLIGHT[i:i + 2], 16) for i in (1, 3, 5))
    count, xs, ys = 0, [], []
    for y, row in enumerate(pixels):
        for x, p in enumerate(row):
            if abs(p[0] - target[0]) <= 2 and abs(p[1] - target[1]) <= 2 and abs(p[2] - target[2]) <= 2:
                count += 1
                xs.append(x)
                ys.append(y)
    return count, (min(xs), min(ys), max(xs), max(ys)) if count else None


@needs_chromium
def test_browser_shows_the_divergent_row_highlighted(pages: dict[str, Path], tmp_path: Path) -> None:
    pixels = _screenshot(pages["diverged"], tmp_path)
    width = len(pixels[0])
    # Not blank: a rendered page has many colours and a good share of pixels off the page background.
    sampled = [p for row in pixels[::4] for p in row[::4]]
    busy = sum(p != pixels[0][0] for p in sampled) / len(sampled)
    assert len(set(sampled)) > 50 and busy > 0.3, (len(set(sampled)), busy)
    # The divergent row: a wide, row-high band of the highlight colour.
    count, box = _highlight_box(pixels)
    assert count > 10_000, count
    x0, y0, x1, y1 = box
    assert x1 - x0 > 0.8 * width and 15 < y1 - y0 < 90, box
    # A matching run has no divergent row: the colour is absent (so the check above can fail).
    match_count, _ = _highlight_box(_screenshot(pages["match"], tmp_path))
    assert match_count == 0


@needs_chromium
def test_browser_runs_the_page_script(pages: dict[str, Path], tmp_path: Path) -> None:
    done = _chromium(pages["diverged"], tmp_path / "profile", "--dump-dom")
    dom = done.stdout
    assert 'data-ready="1"' in dom, done.stderr[-2000:]  # set by the page's script once it ran
    shown = re.search(r'<span id="rows-shown">(\d+)</span>', dom)
    assert shown and int(shown.group(1)) == len(re.findall(r'<tr id="(?:row-\d+|divergent)"', dom)) == 11
    row = re.search(r'<tr id="divergent"[^>]*>.*?</tr>', dom, re.S)
    assert row and "aten::cos" in row.group(0)
