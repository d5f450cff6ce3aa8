"""Write the optional report files (`--html`, `--junit`) next to the normal output.

Paths are checked before anything runs, so a typo fails in a second with exit
2 rather than after two recorded runs. The files do not change the exit code
the verdict decided, except that a file that still cannot be written is a
usage error (exit 2): a CI job that asked for it would otherwise miss it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracediff.diff.sample import AlignmentSample
from tracediff.errors import UserError
from tracediff.outputs import check_file, ensure_dir


def check_output_path(path: str | None, option: str) -> Path | None:
    """The path to write, or a UserError if it cannot be a file we can create. Its directory is created if
    missing, as `--out-dir` is (`--html out/report.html --out-dir out` names a folder the run will make)."""
    if path is None:
        return None
    parent = Path(path).parent
    if not parent.exists():
        ensure_dir(parent, option)
    return check_file(path, option)


def write_report_files(report: dict[str, Any], sample: AlignmentSample | None, html: Path | None,
                       junit: Path | None, echo: Callable[[str], None]) -> None:
    """Render and write whichever of the HTML page and the JUnit XML was asked for."""
    if html is not None:
        from tracediff.report.drift import read_drift
        from tracediff.report.html import render_html

        shown = sample.as_dict() if sample is not None else None
        page = render_html(report, with_divergent_row(report, shown), read_drift(report))
        _write(html, page, "--html")
        echo(f"tracediff: wrote HTML report {html}")
    if junit is not None:
        from tracediff.report.junit import render_junit

        _write(junit, render_junit(report), "--junit")
        echo(f"tracediff: wrote JUnit XML {junit}")


def with_divergent_row(report: dict[str, Any], sample: dict[str, Any] | None) -> dict[str, Any] | None:
    """The sample with trace A's divergent record as `divergent_row` where the rows kept around the traces' own
    first difference do not hold it (a same-input verdict names an op elsewhere): the page always has the row its
    jump buttons go to."""
    index = (report.get("first_divergence") or {}).get("index")
    if sample is None or index is None or not report.get("traces"):
        return sample
    if any(row["a"] and row["a"]["index"] == index for row in sample["rows"]):
        return sample
    from tracediff.diff.place import Place
    from tracediff.errors import TraceFormatError
    from tracediff.trace.reader import Trace

    try:
        record = next((r for r in Trace(report["traces"][0]) if r.get("i") == index), None)
    except (OSError, TraceFormatError):
        return sample
    if record is None:
        return sample
    place = Place.of(record)
    row = {"n": None, "a": {**place.as_dict(), "path": place.path}, "b": None, "status": "differ",
           "rel_diff": (report.get("first_divergence") or {}).get("rel_diff")}
    return {**sample, "divergent_row": row}


def _write(path: Path, text: str, option: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UserError(f"{option} {path}: cannot write ({e.strerror or e})") from None
