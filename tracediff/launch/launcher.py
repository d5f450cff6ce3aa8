"""Run a script under the recorder in a subprocess, one per backend.

A crash, hang or `sys.exit` in one run cannot take down the other run or the
report: each run is its own process with its own timeout, its output is
relayed live (progress) and kept in a log next to its trace.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracediff.errors import ExitCode, Interrupted, UserError
from tracediff.launch.nodes import Nodes
from tracediff.launch.rank_notes import RankNote, read_notes
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
# A command each run is started under, its arguments the run's own command line (`nice -n 10`, a profiler; the
# test suite's fork server client, tests/fork_client.py). It must exit as the run did.
CHILD_PREFIX_VARIABLE = "TRACEDIFF_CHILD_PREFIX"


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
    log = _log_path(trace, recording.nodes)
    notes = Path(tempfile.mkdtemp(prefix="tracediff-ranks-")) if recording.launched else None
    child = [sys.executable, "-m", "tracediff.child", "--out", str(trace)]
    if notes is not None:
        # torch's own launcher: as `torchrun --standalone` (a rendezvous on a free local port) on one host, or
        # this node's part of a job on several. It stops every rank when one fails. Each child writes the
        # trace of its rank, and notes which rank it is (a node learns its global ranks only at launch).
        where = recording.nodes.torchrun_args() if recording.nodes is not None else ["--standalone"]
        child = [sys.executable, "-m", "torch.distributed.run", *where, "--nproc-per-node", str(recording.nproc),
                 "-m", "tracediff.child", "--per-rank", "--rank-notes", str(notes), "--out", str(trace)]
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    prefix = shlex.split(env.get(CHILD_PREFIX_VARIABLE, ""))
    command = [*prefix, *child, "--recording", recording.to_json(), str(script), "--", *script_args]
    start = time.perf_counter()
    try:
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
                _kill_group(process, launcher=notes is not None)
            except KeyboardInterrupt:
                _interrupt_group(process, launcher=notes is not None)
                partial = rank_pattern(trace) if notes is not None else str(trace)
                raise Interrupted(f"the partial trace of backend {backend or 'as written'} is {partial}") from None
            relay.join(timeout=5)
        failed = process.returncode != 0 or timed_out
        elapsed = time.perf_counter() - start
        if notes is not None:
            ranks = node_ranks(read_notes(notes), recording, trace)
            return _ranks_result(backend, trace, log, process.returncode, timed_out, elapsed, ranks)
    finally:
        if notes is not None:
            shutil.rmtree(notes, ignore_errors=True)
    return RunResult(backend, trace, log, process.returncode, timed_out, elapsed,
                     error=_footer_error(trace) if failed else None, output_tail=_output_tail(log) if failed else ())


def _log_path(trace: Path, nodes: Nodes | None = None) -> Path:
    """`t.log` beside `t.jsonl` (outputs.log_path); `t.node1.log` for node 1 of a job on several nodes, whose
    output folder the nodes may share."""
    log = log_path(trace)
    return log.with_suffix(f".node{nodes.node_rank}.log") if nodes is not None else log


@dataclass(frozen=True)
class NodeRanks:
    """The ranks a launch ran on this node: each one's global rank and trace, the job's world size, and the
    local ranks that left no note and whose global rank is not known (c10d numbers the nodes itself)."""

    ranks: tuple[int, ...]
    traces: tuple[Path, ...]
    world_size: int | None
    unknown_locals: tuple[int, ...] = ()


def node_ranks(notes: list[RankNote], recording: Recording, trace: Path) -> NodeRanks:
    """This node's ranks, from the notes the ranks wrote. A rank that never got to write one (it died at
    start) is still named where its global rank follows from the launch: 0..nproc-1 on one host, and
    node_rank * nproc + local rank under the static rendezvous."""
    found = {note.rank: note.trace for note in notes}
    noted_locals = {note.local_rank for note in notes}
    world_size = notes[0].world_size if notes else None
    nodes, nproc = recording.nodes, recording.nproc
    base = 0 if nodes is None else nodes.node_rank * nproc if nodes.rdzv_backend == "static" else None
    unknown: list[int] = []
    for local in range(nproc):
        if local in noted_locals:
            continue
        if base is None:
            unknown.append(local)
            continue
        world_size = world_size or nproc * (nodes.max_nodes if nodes is not None else 1)
        found[base + local] = rank_path(trace, {"RANK": str(base + local), "WORLD_SIZE": str(world_size)})
    ranks = tuple(sorted(found))
    return NodeRanks(ranks, tuple(found[r] for r in ranks), world_size, tuple(unknown))


def _ranks_result(backend: str | None, trace: Path, log: Path, returncode: int, timed_out: bool, elapsed: float,
                  node: NodeRanks) -> RunResult:
    """A run on several processes. The launcher exits 1 whatever a rank did: a rank whose script raised
    (its footer says what) or whose trace was cut off makes it a failed run of the script. The rank named
    is the one whose script raised first: the others often raise after it, their peer gone."""
    def result(code: int, **more: Any) -> RunResult:
        return RunResult(backend, trace, log, code, timed_out, elapsed, rank_traces=node.traces, ranks=node.ranks,
                         world_size=node.world_size, **more)

    if returncode == 0:
        return result(returncode)
    footers = [_footer(path) for path in node.traces]  # None: cut off, or no trace at all
    progress = tuple(f"rank {r}: {_progress(path, footer)}" for r, path, footer in zip(node.ranks, node.traces, footers))
    progress += tuple(f"local rank {local}: no trace (it never started)" for local in node.unknown_locals)
    if timed_out:
        return result(returncode, rank_progress=progress)
    raised = [(footer.get("ended") or 0.0, r, _error_of(footer)) for r, footer in zip(node.ranks, footers)
              if footer is not None and footer.get("error")]
    _, failed_rank, error = min(raised, key=lambda x: (x[0], x[1]), default=(0.0, None, None))
    return result(ExitCode.RUN_FAILED, error=error, output_tail=_output_tail(log), failed_rank=failed_rank,
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
