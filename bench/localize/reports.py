"""Every saved trace pair of a localization run judged again, each whole report written: to check that a change
to the verdict's code changes no report (the re-judge in rejudge.py compares scores, this compares reports).

    PYTHONPATH=/old/checkout python bench/localize/reports.py bench/out/localize-cpu.jsonl old.jsonl
    python bench/localize/reports.py bench/out/localize-cpu.jsonl new.jsonl --compare old.jsonl

Each fault's compiled trace is diffed against its eager reference twice: with the same-input judgement
(the default) and by the trace rules alone (`same_inputs: false`). A report's `first_divergence.rule` is
kept apart, since older checkouts have none.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from tracediff.config import load_config
from tracediff.diff.decide import decide
from tracediff.diff.engine import diff_traces


def reports(results: Path) -> list[dict[str, Any]]:
    base = load_config(None)
    rows = []
    for line in results.read_text().splitlines():
        result = json.loads(line)
        if not result.get("dir") or not result.get("reference"):
            continue
        reference = Path(result["reference"])
        for fused in sorted(Path(result["dir"]).glob("b-*.jsonl")):
            for same_inputs in (True, False):
                config = dataclasses.replace(base, same_inputs=same_inputs)
                report = decide(diff_traces(reference, fused, config), [str(reference), str(fused)], config).to_json()
                rule = (report.get("first_divergence") or {}).pop("rule", None)
                rows.append({"key": [str(fused), same_inputs], "report": report, "rule": rule})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a localization run's .jsonl (bench/localize/run.py)")
    parser.add_argument("out", type=Path, help="where the reports go, one JSON line each")
    parser.add_argument("--compare", type=Path, metavar="JSONL", help="reports written by another checkout")
    args = parser.parse_args()
    rows = reports(args.results)
    args.out.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    print(f"{len(rows)} reports written to {args.out}")
    if args.compare is None:
        return 0
    before = {tuple(row["key"]): row["report"] for row in map(json.loads, args.compare.read_text().splitlines())}
    changed = [row["key"] for row in rows if before.get(tuple(row["key"])) != row["report"]]
    for key in changed:
        print(f"changed: {key[0]} (same_inputs={key[1]})")
    named = sum(bool(row["rule"]) for row in rows if row["report"].get("first_divergence"))
    divergences = sum(bool(row["report"].get("first_divergence")) for row in rows)
    print(f"{len(rows) - len(changed)} of {len(rows)} reports unchanged; {named} of {divergences} divergences name a rule")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
