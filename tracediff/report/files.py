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

        page = render_html(report, sample.as_dict() if sample is not None else None, read_drift(report))
        _write(html, page, "--html")
        echo(f"tracediff: wrote HTML report {html}")
    if junit is not None:
        from tracediff.report.junit import render_junit

        _write(junit, render_junit(report), "--junit")
        echo(f"tracediff: wrote JUnit XML {junit}")


def _write(path: Path, text: str, option: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UserError(f"{option} {path}: cannot write ({e.strerror or e})") from None
