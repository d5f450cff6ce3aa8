"""`tracediff run`: record the script once per backend, then diff the two traces."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tracediff.config import Config
from tracediff.diff.sample import AlignmentSample
from tracediff.errors import UserError, interrupt_keeps
from tracediff.launch.launcher import check_script, record_in_subprocess
from tracediff.launch.nodes import Nodes
from tracediff.launch.recording import Recording
from tracediff.outcome import Outcome, RunResult, Verdict
from tracediff.outputs import RunDir, check_file, rank_path
from tracediff.record.backends import resolve_backend
from tracediff.report.text import render_text
from tracediff.run import backend_source
from tracediff.run.light import run_light
from tracediff.run.narrow import narrow, needs_narrowing
from tracediff.run.recording import compare_runs, record_run


def parse_backends(text: str, script: str, allow_one: bool = False) -> list[str]:
    """Two backend names (or one, for a determinism check), checked before anything runs."""
    names = [n.strip() for n in text.split(",")]
    if len(names) not in ((1, 2) if allow_one else (2,)) or not all(names):
        raise UserError(f"--backends takes two names separated by a comma (e.g. eager,inductor), got {text!r}")
    for name in names:
        check_backend(name, script)
    return names


def check_backend(name: str, script: str) -> None:
    """A backend name that can run: registered with torch, or a custom `module:attr` beside the script."""
    if ":" in name:
        check_custom_backend_module(name, script)
    else:
        resolve_backend(name)


def check_custom_backend_module(spec: str, script: str) -> None:
    """Fail fast if `pkg.module:attr` names a module that cannot be found beside the script, or that
    plainly does not define `attr`.

    Runs no user code (the child imports the module): the module is found with
    `find_spec` and its source read with `ast` (see `backend_source`).
    """
    module_name, _, attr = spec.partition(":")
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        found = None
    finally:
        sys.path.pop(0)
    if found is None:
        raise UserError(f"backend {spec!r}: cannot import module {module_name!r} (not found beside the script or on sys.path)")
    name = attr.split(".")[0]
    if not name:
        raise UserError(f"backend {spec!r}: no attribute after the colon; write module:function")
    if found.origin and found.origin.endswith(".py") and not backend_source.defines(Path(found.origin), name):
        raise UserError(f"backend {spec!r}: {found.origin} defines no {name!r} at top level")


def record_script(script: str, script_args: list[str], backend: str | None, config: Config, output: Path,
                  float64: bool, echo: Callable[[str], None], nproc: int = 1, nodes: Nodes | None = None,
                  judge: bool = False) -> RunResult:
    """`tracediff record`: one run of the script under the recorder, written to `output`. Each rank of a
    distributed run writes `output` with its global rank in the name: in a rank an outside launcher started
    (torchrun, srun: RANK and WORLD_SIZE set), or on `nproc` processes launched here by torch's launcher, this
    node's part of a job on several `nodes` where given. `judge`: each compiled call is judged on its own inputs
    (record/judging/), as `run` judges its candidate. On Ctrl-C it raises Interrupted naming the partial trace."""
    path = check_script(script)
    if backend:
        check_backend(backend, script)
    if judge:
        check_judgeable(backend, float64)
    if nproc > 1 or nodes is not None:
        refuse_inside_a_rank("--nnodes" if nodes is not None else "--nproc-per-node")
    output = rank_path(output)
    check_file(str(output), "-o")
    recording = Recording.of(config, backend, float64=float64, nproc=nproc, nodes=nodes, judge=judge)
    return record_in_subprocess(path, script_args, recording, output, echo)


def check_judgeable(backend: str | None, float64: bool) -> None:
    """`record --same-inputs` judges what a compiling backend made: one-line UserError where nothing is."""
    if float64:
        raise UserError("--same-inputs judges compiled calls, --float64 records the noise reference: one or the other")
    if backend is None or (":" not in backend and resolve_backend(backend).compile_backend in (None, "eager")):
        raise UserError("--same-inputs judges compiled calls: give the backend that compiles them, "
                        "e.g. --backend inductor or --backend aot_eager")


def refuse_inside_a_rank(option: str) -> None:
    """`option` launches the ranks with torch's launcher: not from inside a rank another launcher started."""
    if rank_path(Path("t.jsonl")) != Path("t.jsonl"):
        raise UserError(f"{option} launches the ranks itself: run it outside torchrun or srun (this process is "
                        f"rank {os.environ.get('RANK', '0')} of {os.environ.get('WORLD_SIZE')})")


def run_and_diff(
    script: str,
    script_args: list[str],
    backends: list[str],
    config: Config,
    out_dir: str | None,
    echo: Callable[[str], None],
    narrow_fused: bool = True,
    calibrate: bool = False,
    sample: AlignmentSample | None = None,
) -> Outcome:
    """Run both backends, diff, and write traces + report into the run directory.

    calibrate: also record A's backend with float64 math and judge differences against the noise it shows.
    `sample`, if given, collects a bounded view of the alignment (for `--html`).
    """
    path = check_script(script)
    run_dir = RunDir.create(out_dir, config.compress)
    with interrupt_keeps(f"the traces recorded so far are in {run_dir}"):
        return _run_and_diff(path, script_args, backends, config, run_dir, echo, narrow_fused, calibrate, sample)


def _run_and_diff(path: Path, script_args: list[str], backends: list[str], config: Config, run_dir: RunDir,
                  echo: Callable[[str], None], narrow_fused: bool, calibrate: bool,
                  sample: AlignmentSample | None) -> Outcome:
    if config.light:
        outcome = run_light(path, script_args, backends, config, run_dir, echo, sample)
        outcome = replace(outcome, run_dir=str(run_dir), script=str(path))
        write_report(outcome, run_dir)
        return outcome
    reference = record_run(path, script_args, backends[0], run_dir.trace('a', backends[0]), config, echo)
    return run_against(reference, path, script_args, backends[1], config, run_dir, echo, narrow_fused, calibrate, sample)


def run_against(reference: RunResult, path: Path, script_args: list[str], backend: str, config: Config, run_dir: RunDir,
                echo: Callable[[str], None], narrow_fused: bool = True, calibrate: bool = False,
                sample: AlignmentSample | None = None) -> Outcome:
    """Record `backend` and diff it against a recorded reference run: the second half of `run`.

    Apart from `run` itself, the localization benchmark uses it to diff many
    faulty compiled runs against one eager recording.
    """
    # The candidate is judged call by call on its own inputs (record/judging/), unless it is the reference's backend.
    judge = config.same_inputs and reference.backend != backend
    run_b = record_run(path, script_args, backend, run_dir.trace('b', backend), config, echo,
                       judge=judge)
    noise_trace = None
    if calibrate:
        noise_run = record_run(path, script_args, reference.backend or "eager",
                               run_dir.float64_trace(reference.backend or 'eager'),
                               config, echo, label=" in float64 (noise reference)", float64=True)
        if noise_run.failure():
            raise UserError(f"--calibrate: the float64 re-run failed ({noise_run.failure()}); run without --calibrate")
        noise_trace = noise_run.trace
    runs = [reference, run_b]
    outcome = compare_runs(reference, run_b, config, echo, noise_trace, sample)
    if narrow_fused and needs_narrowing(outcome, run_b.trace) and reference.backend != backend:
        outcome = narrow(outcome, runs, path, script_args, config, run_dir, echo)
    outcome = replace(outcome, run_dir=str(run_dir), script=str(path))
    write_report(outcome, run_dir)
    return outcome


def write_report(outcome: Outcome, run_dir: RunDir, node: int | None = None) -> None:
    """report.json and report.txt; `report.node1.json`, ... for node 1 of a job whose nodes share `run_dir`."""
    report = outcome.to_json()
    json_path, text_path = run_dir.report_json, run_dir.report_text
    if node is not None:
        json_path = json_path.with_name(f"report.node{node}.json")
        text_path = text_path.with_name(f"report.node{node}.txt")
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    text_path.write_text(render_text(report), encoding="utf-8")


def bisect_script(
    script: str,
    script_args: list[str],
    backend: str,
    config: Config,
    out_dir: str | None,
    echo: Callable[[str], None],
) -> Outcome:
    """Diff eager against `backend`; if they diverge, bisect the compiler stage responsible."""

    outcome = run_and_diff(script, script_args, ["eager", backend], config, out_dir, echo)
    if outcome.verdict is Verdict.MATCH:
        outcome = replace(outcome, notes=(*outcome.notes, f"no divergence between eager and {backend}: nothing to bisect"))
    if outcome.verdict is not Verdict.DIVERGED:
        return outcome
    run_dir = RunDir(Path(str(outcome.run_dir)), config.compress)
    with interrupt_keeps(f"the traces and report of eager vs {backend} are in {run_dir}; the bisection was cut short"):
        return _bisect(outcome, script, script_args, backend, config, run_dir, echo)


def _bisect(outcome: Outcome, script: str, script_args: list[str], backend: str, config: Config,
            run_dir: RunDir, echo: Callable[[str], None]) -> Outcome:
    from tracediff.bisect.compiler import bisected, run_bisection

    echo(f"tracediff: bisecting {backend} with torch's CompilerBisector (one recorded run per step)")
    reference = Path(outcome.traces[0])  # the eager trace just recorded
    result, log = run_bisection(check_script(script), script_args, backend, reference, config, run_dir, echo)
    outcome = bisected(outcome, result, log)
    write_report(outcome, run_dir)
    return outcome
