"""Cost of `--html` on a large diff: the alignment sample must keep memory bounded.

    python bench/html_report.py [A.jsonl B.jsonl]

Diffs the pair twice, each in a fresh subprocess: plain `diff_traces`, then
with an `AlignmentSample` and `render_html`. Prints wall time, peak RSS
(VmHWM) and the page size. Without arguments it uses bench/run.py's cached
synthetic 1M-record pair (bench/out/synth/..., made by `make bench`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "out" / "synth" / "synth-v1-n1000000-e400-s1234"


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(a: str, b: str, html: bool) -> None:
    from tracediff.config import Config
    from tracediff.diff.decide import decide
    from tracediff.diff.engine import diff_traces
    from tracediff.diff.sample import AlignmentSample
    from tracediff.report.html import render_html

    t0 = time.perf_counter()
    sample = AlignmentSample() if html else None
    result = diff_traces(a, b, Config(), sample=sample)
    report = decide(result, [a, b], Config()).to_json()
    page = render_html(report, sample.as_dict()) if sample is not None else ""
    out = {"wall_s": time.perf_counter() - t0, "rss_peak_mib": _peak_rss_mib(), "html_bytes": len(page.encode()),
           "verdict": report["verdict"]}
    if sample is not None:
        data = sample.as_dict()
        out.update(rows_seen=data["total_rows"], rows_kept=len(data["rows"]), points=len(data["series"]["points"]),
                   bucket_width=data["series"]["bucket_width"])
    print(json.dumps(out))


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4] == "html")
        return
    a, b = (sys.argv[1:3] if len(sys.argv) >= 3 else (str(DEFAULT / "a.jsonl"), str(DEFAULT / "b.jsonl")))
    if not Path(a).is_file():
        sys.exit(f"no trace {a}: run `make bench` once to generate the synthetic pair, or pass two traces")
    for mode in ("plain", "html"):
        done = subprocess.run([sys.executable, __file__, "--child", a, b, mode], capture_output=True, text=True,
                              check=True)
        print(mode, done.stdout.strip())


if __name__ == "__main__":
    main()
