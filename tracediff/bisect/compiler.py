"""`tracediff bisect`: which compiler stage, subsystem and application breaks the numbers.

Uses torch's own `CompilerBisector` with tracediff's verdict as the oracle:
each oracle call re-runs the script in a subprocess under the bisector's
current settings, records it, and diffs it against the eager reference.

Known upstream problems this avoids: the bisector keeps state in files that,
left in inductor's cache directory, change later unrelated compiles. Here the
state lives in a private temporary directory, handed to each subprocess as
its inductor cache directory and removed in `finally` (also on Ctrl-C and on
errors); the user's cache directory is never touched. The bisector's own
progress goes to stderr so `--format json` keeps stdout clean.

Pinned torch internals: CompilerBisector.do_bisect / in_process_cache /
bisection_enabled / get_backend / get_subsystem / get_run_state, and the
TORCH_BISECT_* environment variables its subprocess mode uses.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracediff.config import Config
from tracediff.diff.engine import diff_traces
from tracediff.errors import TraceFormatError, UserError
from tracediff.launch.launcher import record_in_subprocess
from tracediff.launch.recording import Recording
from tracediff.outcome import Outcome
from tracediff.outputs import RunDir


def check_bisectable(backend: str) -> None:
    """Refuse, before anything runs, a backend that CompilerBisector cannot bisect.

    The bisector walks torch's own backends and their subsystems; for any other
    backend (a custom `module:attr` callable, an out-of-tree registered one) it
    would spend a run per step on torch's backends and then find nothing.
    """
    from torch._inductor.compiler_bisector import BACKENDS

    from tracediff.record.backends import DYNAMO, resolve_backend

    known = ", ".join(BACKENDS)
    if ":" in backend:
        raise UserError(
            f"bisect: {backend!r} is a custom backend, and torch's CompilerBisector bisects only torch's own "
            f"backends and their stages ({known}); if it calls inductor's compile_fx, bisect with --backend "
            f"inductor, otherwise `tracediff run --backends eager,{backend}` names the divergent op")
    name = "eager" if backend == DYNAMO else resolve_backend(backend).name
    if name not in BACKENDS:
        raise UserError(f"bisect: torch's CompilerBisector cannot bisect backend {backend!r}, only {known}; "
                        f"`tracediff run --backends eager,{backend}` names the divergent op")


@dataclass
class OracleLog:
    """Each oracle call: the bisector's position and the verdict there."""

    steps: list[dict[str, Any]] = field(default_factory=list)


@contextlib.contextmanager
def private_bisector_state() -> Iterator[str]:
    """Point CompilerBisector at a fresh private directory; restore and delete it afterwards."""
    from torch._inductor.compiler_bisector import CompilerBisector

    state_dir = tempfile.mkdtemp(prefix="tracediff-bisect-")
    saved = (CompilerBisector.in_process_cache, CompilerBisector.bisection_enabled)
    CompilerBisector.in_process_cache = state_dir
    try:
        yield state_dir
    finally:
        CompilerBisector.in_process_cache, CompilerBisector.bisection_enabled = saved
        shutil.rmtree(state_dir, ignore_errors=True)


def _bisector_env(state_dir: str) -> dict[str, str]:
    """What a subprocess needs to act on the bisector's current step (as torch's `run` mode passes it)."""
    from torch._inductor.compiler_bisector import CompilerBisector

    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_BISECT_")}
    env["TORCHINDUCTOR_CACHE_DIR"] = state_dir  # the subprocess reads the state files from <cache>/bisect
    backend = CompilerBisector.get_backend()
    subsystem = CompilerBisector.get_subsystem()
    if backend:
        env["TORCH_BISECT_BACKEND"] = backend
    if subsystem and backend:
        env["TORCH_BISECT_SUBSYSTEM"] = subsystem
        if CompilerBisector.get_run_state(backend, subsystem) == "test_disable":
            env["TORCH_BISECT_MAX"] = "-1"
    return env


def run_bisection(
    script: Path,
    script_args: list[str],
    backend: str,
    reference: Path,
    config: Config,
    run_dir: RunDir,
    echo: Callable[[str], None],
) -> tuple[Any, OracleLog]:
    """CompilerBisector.do_bisect with a tracediff oracle; returns (BisectionResult | None, log)."""
    from torch._inductor.compiler_bisector import CompilerBisector

    log = OracleLog()
    with private_bisector_state() as state_dir:

        def oracle() -> bool:
            call = len(log.steps)
            env = _bisector_env(state_dir)
            stage = env.get("TORCH_BISECT_BACKEND"), env.get("TORCH_BISECT_SUBSYSTEM")
            trace = run_dir.bisect_trace(call)
            started = time.perf_counter()
            run = record_in_subprocess(script, script_args, Recording.of(config, backend), trace,
                                       echo=lambda _line: None, env=env)
            good = run.ok and _matches(reference, run.trace, config)
            log.steps.append({"call": call, "backend": stage[0], "subsystem": stage[1], "good": good,
                              "run_failed": run.failure(), "seconds": round(time.perf_counter() - started, 1)})
            echo(f"tracediff: bisect step {call}: backend={stage[0]} subsystem={stage[1] or '-'} -> "
                 f"{'good' if good else 'diverges'} ({time.perf_counter() - started:.1f} s)")
            trace.unlink(missing_ok=True)  # one trace per step would pile up; the verdict is logged
            return good

        with contextlib.redirect_stdout(sys.stderr):
            result = CompilerBisector.do_bisect(oracle)
    return result, log


def _matches(reference: Path, trace: Path, config: Config) -> bool:
    try:
        return diff_traces(reference, trace, config).first is None
    except TraceFormatError:
        return False


_OP_OVERLOAD = re.compile(r"<OpOverload\(op='([^']+)', overload='([^']+)'\)>")


def readable_debug_info(info: str | None) -> str | None:
    """`<OpOverload(op='aten.cos', overload='default')>` -> `aten.cos.default`."""
    return _OP_OVERLOAD.sub(lambda m: f"{m.group(1)}.{m.group(2)}", info) if info else info


def bisected(outcome: Outcome, result: Any, log: OracleLog) -> Outcome:
    """`outcome` (a divergence) with the bisection's result, steps and note."""
    if result is None:
        bisect = None
        note = "the bisector found every stage good: the divergence did not reproduce under bisection (flaky?)"
    else:
        bisect = {"backend": result.backend, "subsystem": result.subsystem, "bisect_number": result.bisect_number,
                  "debug_info": readable_debug_info(result.debug_info)}
        where = f"backend {result.backend}"
        if result.subsystem:
            where += f", subsystem {result.subsystem}"
        if result.debug_info:
            where += f", application #{result.bisect_number}: {bisect['debug_info']}"
        note = f"bisected: the divergence first appears at {where}"
    return replace(outcome, bisected=True, bisect=bisect, bisect_steps=tuple(log.steps), oracle_calls=len(log.steps),
                   notes=(*outcome.notes, note))
