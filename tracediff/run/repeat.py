"""`tracediff run --repeat N`: record each backend N times and check that its runs agree.

Run 1 of each backend is compared with each of its other runs (a determinism
check), and with two backends, run 1 of A with run 1 of B. The report is the
first comparison that failed, else the first that diverged (determinism
checks first: if a backend disagrees with itself, a difference between
backends says little), else A vs B (or run 1 vs run 2 of the one backend).
Every comparison is summarized under `repeat`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracediff.config import Config
from tracediff.errors import interrupt_keeps
from tracediff.launch.launcher import check_script
from tracediff.outcome import Outcome, RunResult, Verdict
from tracediff.outputs import RunDir
from tracediff.report.text import describe_comparison
from tracediff.run.narrow import narrow, needs_narrowing
from tracediff.run.pipeline import write_report
from tracediff.run.recording import compare_runs, record_run


def _summary(outcome: Outcome, backends: list[str], runs: list[int]) -> dict[str, Any]:
    first = outcome.first_divergence
    return {
        "backends": backends,
        "runs": runs,
        "traces": list(outcome.traces),
        "verdict": outcome.verdict.value,
        "exit_code": outcome.exit_code,
        "first_divergence": None if not first else {
            "kind": first.cause.kind, "op": first.site.op, "index": first.site.index, "source": first.site.source,
            "module": first.site.module, "rel_diff": first.rel_diff,
        },
        "cause": (outcome.determinism or {}).get("cause"),
    }


def run_repeated(
    script: str,
    script_args: list[str],
    backends: list[str],
    repeat: int,
    config: Config,
    out_dir: str | None,
    echo: Callable[[str], None],
    narrow_fused: bool = True,
) -> Outcome:
    path = check_script(script)
    run_dir = RunDir.create(out_dir, config.compress)
    with interrupt_keeps(f"the traces recorded so far are in {run_dir}"):
        return _run_repeated(path, script_args, backends, repeat, config, run_dir, echo, narrow_fused)


def _run_repeated(path: Path, script_args: list[str], backends: list[str], repeat: int, config: Config,
                  run_dir: RunDir, echo: Callable[[str], None], narrow_fused: bool) -> Outcome:
    unique = list(dict.fromkeys(backends))
    runs: dict[str, list[RunResult]] = {}
    for backend in unique:
        runs[backend] = [
            record_run(path, script_args, backend, run_dir.trace(f'r{k}', backend), config, echo,
                       label=f" (run {k} of {repeat})")
            for k in range(1, repeat + 1)
        ]
    compared: list[tuple[dict[str, Any], Outcome]] = []
    for backend in unique:
        for k, other in enumerate(runs[backend][1:], start=2):
            outcome = compare_runs(runs[backend][0], other, config, echo)
            compared.append((_summary(outcome, [backend, backend], [1, k]), outcome))
            echo(f"tracediff: {describe_comparison(compared[-1][0])}")
    cross: Outcome | None = None
    if len(unique) == 2:
        pair = [runs[unique[0]][0], runs[unique[1]][0]]
        cross = compare_runs(pair[0], pair[1], config, echo)
        if narrow_fused and needs_narrowing(cross, pair[1].trace):
            cross = narrow(cross, pair, path, script_args, config, run_dir, echo)
        compared.append((_summary(cross, unique, [1, 1]), cross))
        echo(f"tracediff: {describe_comparison(compared[-1][0])}")

    chosen = next((o for _, o in compared if o.verdict is Verdict.FAILED), None) \
        or next((o for _, o in compared if o.verdict is Verdict.DIVERGED), None) \
        or cross or compared[0][1]
    outcome = replace(chosen, repeat=tuple(entry for entry, _ in compared), repeat_count=repeat, run_dir=str(run_dir))
    write_report(outcome, run_dir)
    return outcome
