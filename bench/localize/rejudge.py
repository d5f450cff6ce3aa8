"""Re-judge a localization run from the traces it saved, with the code checked out now.

    python bench/localize/run.py --rejudge bench/out/localize-cpu.jsonl

Recording is most of a benchmark's time (and a GPU's), while a change to the
diff or the narrowing needs only the diffs again. For each result line the
saved fused trace is diffed against the eager reference; where the verdict asks
for narrowing, the one-kernel-per-op trace the run saved is used (and the
float64 trace, where one was saved). A verdict that needs a recording the run
did not make scores `failed`, with the reason: re-run the benchmark for it.
Whether a fault is observable is judged again from the results the run saved
(observe.py), where they are still there; otherwise it is kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from observe import clean_results, float32_tolerance, observability

from tracediff.config import Config
from tracediff.diff.decide import decide
from tracediff.diff.engine import diff_traces
from tracediff.errors import ExitCode
from tracediff.launch.recording import Recording
from tracediff.outcome import RunResult
from tracediff.outputs import RunDir
from tracediff.run.narrow import narrow, needs_narrowing
from tracediff.trace.reader import Trace


def saved_recordings(run_dir: Path) -> Callable[..., RunResult]:
    """A stand-in for `launcher.record_in_subprocess` handing back what the run recorded in `run_dir`."""

    def record(_script: Path, _args: list[str], recording: Recording, trace: Path, *_: Any, **__: Any) -> RunResult:
        backend = recording.backend
        saved = run_dir / trace.name
        if saved.is_file():
            return RunResult(backend, saved, saved.with_suffix(".log"), 0, False, 0.0)
        log = run_dir / "rejudge.log"
        log.write_text(f"{trace.name} was not recorded by the benchmark run\n")
        return RunResult(backend, saved, log, ExitCode.USAGE, False, 0.0)  # `failure()`: the log's last line

    return record


def with_observability(result: dict[str, Any], config: Config) -> dict[str, Any]:
    """`result` with whether its fault is observable judged again, where the run's saved results are there."""
    a_file, b_file = Path(result.get("reference_results") or ""), Path(result["dir"]) / "b.pt"
    if result.get("plant") is None or not (a_file.is_file() and b_file.is_file()):
        return result
    tolerance = float32_tolerance(config, result.get("device", "cpu"))
    return dict(result, **observability(a_file, b_file, clean_results(Path(result["dir"])), tolerance,
                                        result["model"]))


def rejudge(result: dict[str, Any], config: Config) -> dict[str, Any]:
    """`result` (a line of the run's .jsonl) with its verdict, report and candidates judged again."""
    if result.get("outcome") == "failed" or result.get("verdict") == "failed":
        return result
    run_dir, reference = Path(result["dir"]), Path(result["reference"])
    fused = next(run_dir.glob("b-*.jsonl"), None)
    if fused is None:
        return dict(result, outcome="failed", detail=f"no trace of the compiled run in {run_dir}")
    outcome = decide(diff_traces(reference, fused, config), [str(reference), str(fused)], config)
    if needs_narrowing(outcome, fused):
        # The backend as recorded (a custom backend's `module:function`), which names the narrowing's trace.
        backend = Trace(fused).header.get("backend") or result["backend"]
        runs = [RunResult("eager", reference, reference.with_suffix(".log"), 0, False, 0.0),
                RunResult(backend, fused, fused.with_suffix(".log"), 0, False, 0.0)]
        outcome = narrow(outcome, runs, Path("target.py"), [], config, RunDir(run_dir), echo=lambda _line: None,
                         record=saved_recordings(run_dir))
    report = outcome.to_json()
    first = report.get("first_divergence") or {}
    narrowing = first.get("narrowing") or {}
    if narrowing.get("result") == "failed":
        return dict(result, outcome="failed", detail=narrowing.get("detail"))
    return dict(result, verdict=report["verdict"], reported={k: first.get(k) for k in ("op", "source", "module")},
                candidates=[c.get("source") for c in first.get("candidates") or []],
                narrowing=narrowing.get("result"), pinned_by=first.get("pinned_by"))


def rejudge_file(path: Path, config: Config, score: Callable[[dict[str, Any]], str],
                 log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every result of the run in `path`, judged again and scored; changed outcomes are logged."""
    results = []
    for line in path.read_text().splitlines():
        before = json.loads(line)
        after = rejudge(with_observability(before, config), config)
        if after.get("outcome") != "failed" or before.get("outcome") == "failed":
            after["outcome"] = score(after)
        if after["outcome"] != before.get("outcome"):
            log(f"{after['dir']}: {before.get('outcome')} -> {after['outcome']} "
                f"({(after.get('reported') or {}).get('source')}; {after.get('detail') or ''})")
        results.append(after)
    return results
