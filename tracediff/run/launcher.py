"""Run a script under the recorder in a subprocess, one per backend.

A crash, hang or `sys.exit` in one run cannot take down the other run or the
report: each run is its own process with its own timeout, its output is
relayed live (progress) and kept in a log next to its trace.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tracediff.errors import ExitCode, UserError


@dataclass(frozen=True)
class RunResult:
    backend: str | None
    trace: Path
    log: Path
    returncode: int
    timed_out: bool
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def failure(self) -> str | None:
        """One line on why this run failed, or None."""
        if self.timed_out:
            return f"run with backend {self.backend} timed out after {self.elapsed_s:.0f} s"
        if self.returncode == ExitCode.RUN_FAILED:
            return f"the script raised under backend {self.backend} (see {self.log})"
        if self.returncode == ExitCode.USAGE:
            return _last_line(self.log)
        if self.returncode < 0:
            return f"run with backend {self.backend} was killed by signal {-self.returncode} (crash?)"
        if self.returncode != 0:
            return f"run with backend {self.backend} exited with status {self.returncode} (see {self.log})"
        return None


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "failed"
    return lines[-1].removeprefix("tracediff: ") if lines else "failed"


def check_script(script: str) -> Path:
    path = Path(script)
    if not path.exists():
        raise UserError(f"{script}: no such script")
    if path.is_dir():
        raise UserError(f"{script}: is a directory, expected a Python script")
    return path


def new_run_dir(base: str | os.PathLike[str] | None) -> Path:
    """The output directory: as given, or .tracediff/<timestamp>/ (unique)."""
    if base is not None:
        path = Path(base)
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(".tracediff") / stamp
        suffix = 1
        while path.exists():
            path = Path(".tracediff") / f"{stamp}-{suffix}"
            suffix += 1
    path.mkdir(parents=True, exist_ok=True)
    return path


def trace_name(slot: str, backend: str | None) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", backend or "as-written")
    return f"{slot}-{safe}"


def record_in_subprocess(
    script: Path,
    script_args: list[str],
    *,
    backend: str | None,
    trace: Path,
    seed: int | None,
    exact: bool,
    fallback_random: bool | None,
    timeout: float,
    echo: Callable[[str], None],
    materialize: bool = False,
    float64: bool = False,
    env: dict[str, str] | None = None,
    child_options: list[str] | None = None,
    cwd: str | None = None,
) -> RunResult:
    """Run `script` under the recorder with `backend`, writing `trace`; never raises for script failures."""
    log = trace.with_suffix("").with_suffix(".log") if trace.suffix == ".gz" else trace.with_suffix(".log")
    command = [sys.executable, "-m", "tracediff.run.child", "--out", str(trace)]
    if backend is not None:
        command += ["--backend", backend]
    command += ["--no-seed"] if seed is None else ["--seed", str(seed)]
    if exact:
        command.append("--exact")
    if materialize:
        command.append("--materialize")
    if float64:
        command.append("--float64")
    if fallback_random is not None:
        command += ["--fallback-random", "on" if fallback_random else "off"]
    command += child_options or []
    command += [str(script), "--", *script_args]

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
            _kill_group(process)
        except KeyboardInterrupt:
            _kill_group(process)
            raise
        relay.join(timeout=5)
    return RunResult(backend, trace, log, process.returncode, timed_out, time.perf_counter() - start)


def _relay(process: subprocess.Popen[str], log_file: object, echo: Callable[[str], None], backend: str | None) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        log_file.write(line)  # type: ignore[attr-defined]
        echo(f"[{backend or 'as-written'}] {line.rstrip()}")


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
