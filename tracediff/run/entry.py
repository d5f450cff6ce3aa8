"""The core of `tracediff run` and `tracediff diff`, one function each: the CLI parses and calls them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tracediff.config import Config
from tracediff.diff.decide import decide
from tracediff.diff.engine import diff_traces
from tracediff.diff.sample import AlignmentSample
from tracediff.errors import UserError
from tracediff.outcome import Outcome
from tracediff.run.pipeline import parse_backends, run_and_diff
from tracediff.run.repeat import run_repeated


def run_script(script: str, script_args: list[str], backends: str, config: Config, out_dir: str | None,
               echo: Callable[[str], None], *, repeat: int | None = None, calibrate: bool = False,
               narrow_fused: bool = True, sample: AlignmentSample | None = None) -> Outcome:
    """Two backends once (`run_and_diff`), or each backend `repeat` times (`run_repeated`: one backend
    given, or --repeat above 1). `sample` collects the alignment for --html (a single comparison only)."""
    names = parse_backends(backends, script, allow_one=True)
    if repeat is not None and repeat < 1:
        raise UserError(f"--repeat takes a number of runs of at least 1, got {repeat}")
    if len(names) == 1 and (repeat or 2) < 2:
        raise UserError("one backend needs --repeat 2 or more: there is nothing to compare a single run with")
    if len(names) == 1 or (repeat or 1) > 1:
        if calibrate:
            raise UserError("--calibrate compares two backends once; it does not combine with --repeat or one backend")
        return run_repeated(script, script_args, names, repeat or 2, config, out_dir, echo, narrow_fused=narrow_fused)
    return run_and_diff(script, script_args, names, config, out_dir, echo, narrow_fused=narrow_fused,
                        calibrate=calibrate, sample=sample)


def diff_recordings(trace_a: str, trace_b: str, config: Config, noise_trace: str | None = None,
                    sample: AlignmentSample | None = None) -> Outcome:
    """`tracediff diff`: two recordings compared, A the reference; `noise_trace` a float64 re-run of A."""
    if noise_trace is not None and not Path(noise_trace).is_file():
        raise UserError(f"{noise_trace}: no such file")
    result = diff_traces(trace_a, trace_b, config, sample=sample, noise_trace=noise_trace)
    return decide(result, [trace_a, trace_b], config)


def is_single_comparison(backends: str, repeat: int | None) -> bool:
    """Does `run_script` make one comparison (whose alignment an HTML report can draw)?"""
    return len(backends.split(",")) == 2 and (repeat or 1) <= 1
