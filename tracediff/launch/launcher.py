"""Run a script under the recorder in a subprocess, one per backend.

A crash, hang or `sys.exit` in one run cannot take down the other run or the
report: each run is its own process with its own timeout, its output is
relayed live (progress) and kept in a log next to its trace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracediff.errors import ExitCode, Interrupted, UserError
from tracediff.launch.recording import Recording
from tracediff.outcome import RunResult
from tracediff.outputs import log_path, rank_path, rank_pattern
from tracediff.trace.schema import Footer

# How many lines of a failed run's output the report repeats (its log keeps all of it).
TAIL_LINES = 6
# Seconds a run has to stop after Ctrl-C is passed on to it (its trace gets a footer) before it is killed.
INTERRUPT_GRACE_S = 5.0
# Seconds torch's elastic launcher has, once told to stop (SIGTERM), to stop its ranks: they run in
# sessions of their own, out of reach of a signal to the launcher's process group.
LAUNCHER_GRACE_S = 30.0


def _output_tail(log: Path) -> tuple[str, ...]:
    """The script's last lines of output, without the child's own `tracediff:` lines."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ()
    kept = [line.rstrip()[:300] for line in lines if line.strip() and not line.startswith("tracediff: ")]
    return tuple(kept[-TAIL_LINES:])


def _footer(trace: Path) -> Footer | None:
    """The trace's footer; None if it has none (cut off) or cannot be read."""
    from tracediff.trace.reader import read_footer

    try:
        return read_footer(trace)
    except (OSError, UserError):
        return None


def _error_of(footer: Footer | None) -> dict[str, Any] | None:
    error = (footer or {}).get("error")
    return {k: error.get(k) for k in ("type", "message")} if isinstance(error, dict) else None


def _footer_error(trace: Path) -> dict[str, Any] | None:
    """What the script raised, from the trace's footer; None if it raised nothing or the trace has no footer."""
    return _error_of(_footer(trace))


def check_script(script: str) -> Path:
    path = Path(script)
    if not path.exists():
        raise UserError(f"{script}: no such script")
    if path.is_dir():
        raise UserError(f"{script}: is a directory, expected a Python script")
    check_syntax(path)
    return path


def check_syntax(path: Path) -> None:
    """A script Python cannot even compile fails here, in one line, before any run is recorded."""
    try:
        source = path.read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as e:  # IndentationError and TabError are SyntaxErrors
        where = f"{path}:{e.lineno}" if e.lineno else str(path)
        raise UserError(f"{where}: {type(e).__name__}: {e.msg} (the script does not compile; nothing was run)") from None
    except ValueError as e:  # null bytes in the source
        raise UserError(f"{path}: {e} (the script does not compile; nothing was run)") from None


def record_in_subprocess(script: Path, script_args: list[str], recording: Recording, trace: Path,
                         echo: Callable[[str], None], env: dict[str, str] | None = None,
                         cwd: str | None = None) -> RunResult:
    """Run `script` under the recorder as `recording` says, writing `trace`; never raises for script failures."""
    backend, timeout = recording.backend, recording.timeout
    log = log_path(trace)
    child = [sys.executable, "-m", "tracediff.child", "--out", str(trace)]
    ranks: tuple[Path, ...] = ()
    if recording.nproc > 1:
        # torch's own launcher, as `torchrun --standalone` (a rendezvous on a free local port): it stops
        # every rank when one fails. Each child writes the trace of its rank.
        child = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                 str(recording.nproc), "-m", "tracediff.child", "--per-rank", "--out", str(trace)]
        ranks = tuple(rank_path(trace, {"RANK": str(r), "WORLD_SIZE": str(recording.nproc)})
                      for r in range(recording.nproc))
    command = [*child, "--recording", recording.to_json(), str(script), "--", *script_args]

    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as log_file:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True,
            text=True, errors="replace",
        )
        relay = threading.Thread(target=_relay, args=(process, log_file, echo, backend), daemon=True)
        relay.start()
        timed_out = False
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process, launcher=bool(ranks))
        except KeyboardInterrupt:
            _interrupt_group(process, launcher=bool(ranks))
            partial = rank_pattern(trace) if ranks else str(trace)
            raise Interrupted(f"the partial trace of backend {backend or 'as written'} is {partial}") from None
        relay.join(timeout=5)
    failed = process.returncode != 0 or timed_out
    elapsed = time.perf_counter() - start
    if ranks:
        return _ranks_result(backend, trace, log, process.returncode, timed_out, elapsed, ranks)
    return RunResult(backend, trace, log, process.returncode, timed_out, elapsed,
                     error=_footer_error(trace) if failed else None, output_tail=_output_tail(log) if failed else ())


def _ranks_result(backend: str | None, trace: Path, log: Path, returncode: int, timed_out: bool, elapsed: float,
                  ranks: tuple[Path, ...]) -> RunResult:
    """A run on several processes. The launcher exits 1 whatever a rank did: a rank whose script raised
    (its footer says what) or whose trace was cut off makes it a failed run of the script. The rank named
    is the one whose script raised first: the others often raise after it, their peer gone."""
    if returncode == 0:
        return RunResult(backend, trace, log, returncode, timed_out, elapsed, rank_traces=ranks)
    footers = [_footer(path) for path in ranks]  # None: cut off, or no trace at all
    progress = tuple(f"rank {r}: {_progress(path, footer)}" for r, (path, footer) in enumerate(zip(ranks, footers)))
    if timed_out:
        return RunResult(backend, trace, log, returncode, timed_out, elapsed, rank_traces=ranks,
                         rank_progress=progress)
    raised = [(footer.get("ended") or 0.0, r, _error_of(footer)) for r, footer in enumerate(footers)
              if footer is not None and footer.get("error")]
    _, failed_rank, error = min(raised, key=lambda x: (x[0], x[1]), default=(0.0, None, None))
    return RunResult(backend, trace, log, ExitCode.RUN_FAILED, timed_out, elapsed, error=error,
                     output_tail=_output_tail(log), rank_traces=ranks, failed_rank=failed_rank,
                     rank_progress=progress)


def _progress(trace: Path, footer: Footer | None) -> str:
    """How far one rank got: its records, and whether its trace (`footer`: its footer, if any) has a footer."""
    from tracediff.trace.reader import Trace

    if footer is not None:
        return f"{footer.get('records')} records, {'raised' if footer.get('error') else 'finished'}"
    if not trace.is_file():
        return "no trace"
    try:
        return f"{sum(1 for _ in Trace(trace))} records, cut off"
    except (OSError, UserError):
        return "an unreadable trace"


def _relay(process: subprocess.Popen[str], log_file: object, echo: Callable[[str], None], backend: str | None) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        log_file.write(line)  # type: ignore[attr-defined]
        echo(f"[{backend or 'as-written'}] {line.rstrip()}")


def _interrupt_group(process: subprocess.Popen[str], launcher: bool = False) -> None:
    """Pass Ctrl-C on to the run's process group, so the script stops and its trace gets a footer; then kill
    whatever is left of the group (workers the script started included), also on a second Ctrl-C."""
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=INTERRUPT_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired, KeyboardInterrupt):
        pass
    finally:
        _kill_group(process, launcher)


def _kill_group(process: subprocess.Popen[str], launcher: bool = False) -> None:
    """Kill the run's process group. `launcher`: the run is torch's elastic launcher, whose ranks are in
    sessions of their own; it is told to stop them first (SIGTERM), and killed if it has not in time."""
    try:
        if launcher and process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=LAUNCHER_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
