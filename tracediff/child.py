"""Child process entry: run one script under the recorder with one backend.

    python -m tracediff.child --out a.jsonl --recording '{"backend": "inductor"}' script.py -- ARGS...

The script runs as `__main__` with its own argv and its directory first on
sys.path, as `python script.py` would. Exit status: 0 when the script
finished, 3 when it raised (the trace's footer holds the exception), 2 for
bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import runpy
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracediff.errors import ExitCode, UserError
from tracediff.launch.recording import Recording
from tracediff.outputs import rank_path


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tracediff.child")
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-rank", action="store_true",
                        help="under torch's launcher: write --out with the rank in its name (t.rank1.jsonl)")
    parser.add_argument("--rank-notes", metavar="DIR", default=None,
                        help="under torch's launcher: note this rank's global rank and trace in DIR, for the "
                             "launching tracediff (launch/rank_notes.py)")
    parser.add_argument("--recording", required=True, metavar="JSON",
                        help="how to record, as the launcher serialized it (launch/recording.py's `Recording`)")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    environment = dict(os.environ)  # as given, before any import sets its own (the trace's header records it)
    from tracediff.quiet import silence_missing_numpy

    silence_missing_numpy()
    options = _parse(sys.argv[1:] if argv is None else argv)
    script = os.path.abspath(options.script)
    script_args = options.args[1:] if options.args[:1] == ["--"] else options.args

    from tracediff.record.backends import resolve_backend
    from tracediff.record.session import RecordingSession

    # Like `python script.py`: modules beside the script import (custom backends too).
    sys.path.insert(0, os.path.dirname(script))
    try:
        recording = Recording.from_json(options.recording)
        backend = resolve_backend(recording.backend) if recording.backend else None
        scope, policy = _scope_and_policy(recording)
    except ValueError as e:
        print(f"tracediff: an unreadable --recording ({e})", file=sys.stderr)
        return ExitCode.USAGE
    except UserError as e:
        print(f"tracediff: {e}", file=sys.stderr)
        return ExitCode.USAGE
    applier = None
    if recording.fix:
        from tracediff.fix.apply import FixApplier
        from tracediff.fix.changes import decode

        applier = FixApplier(decode(recording.fix))

    sys.argv = [script, *script_args]
    if recording.time_out is not None:
        return _run_timed(script, backend, recording.fallback_random, recording.seed, applier, recording.time_out)
    materialize: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if recording.materialize:
        from tracediff.record.materialize import materialize_all

        materialize = materialize_all()
    capture = None
    if recording.capture:
        from tracediff.repro.capture import ArgumentCapture

        capture = ArgumentCapture(set(recording.capture))
    upcast: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if recording.float64:
        from tracediff.record.upcast import Float64Upcast

        upcast = Float64Upcast()  # entered before the recorder, so the recorder sees the program's ops
    session = RecordingSession(
        _trace_path(options),
        backend=backend,
        seed=recording.seed,
        exact=recording.exact,
        fallback_random=recording.fallback_random,
        command=[options.script, *script_args],
        materialized=recording.materialize,
        script_dir=os.path.dirname(script),
        recorder_factory=capture.recorder if capture else None,
        upcast="float64" if recording.float64 else None,
        before_compile=applier.before_compile if applier else None,
        judge=policy,
        scope=scope,
        environment=environment,
    )
    if applier is not None:
        applier.before_script()
    # What torch, inductor and tracediff imported lives to the end: the garbage collector need not walk it again,
    # in the script's collections, in its forked DataLoader workers (where that copies shared pages), or at exit
    # (~0.8 s of CPU per recording with inductor imported). The script's own objects are collected as ever.
    gc.freeze()
    try:
        with _script_exit_status() as status, materialize, upcast, session:
            runpy.run_path(script, run_name="__main__")
    finally:
        if capture is not None and recording.capture_out is not None:
            capture.save(str(recording.capture_out))
        if applier is not None:
            applier.report_unmade()
        sys.stdout.flush()
    return status.code


def _trace_path(options: argparse.Namespace) -> Path:
    """The trace to write: --out, with the rank in its name under torch's launcher (--per-rank), which
    this rank notes for the launching tracediff (--rank-notes)."""
    out = rank_path(Path(options.out)) if options.per_rank else Path(options.out)
    if options.rank_notes is not None:
        from tracediff.launch.rank_notes import write_note

        write_note(Path(options.rank_notes), out)
    return out


def _scope_and_policy(recording: Recording) -> tuple[Any, Any]:
    """Which ops the recording keeps (record/scope.py), and which compiled calls are judged (None: none)."""
    from tracediff.record.judging.policy import InWindow, JudgePolicy, TimeBudget
    from tracediff.record.scope import CallWindow, RecordScope

    if recording.light and recording.window:
        raise UserError("--light and --window exclude each other")
    if recording.window:
        window = CallWindow.parse(recording.window)
        return RecordScope("window", window), InWindow(window) if recording.judge else None
    if recording.light:
        return RecordScope("calls"), TimeBudget() if recording.judge else None
    return RecordScope(), JudgePolicy() if recording.judge else None


def _run_timed(script: str, backend: Any, fallback_random: bool | None, seed: int | None, applier: Any,
               out: Path) -> int:
    """`tracediff fix`'s timing run: the script unrecorded, its compiled calls timed (record/call_timer.py)."""
    import torch._inductor.config as inductor_config

    from tracediff.record.call_timer import CallTimer
    from tracediff.record.compile_redirect import CompileRedirect
    from tracediff.record.session import fallback_random_setting, seed_everything

    if seed is not None:
        seed_everything(seed)
    # As a recording sets it: the code timed is the code whose numbers were compared.
    inductor_config.fallback_random = fallback_random_setting(backend, fallback_random)
    timer = CallTimer()
    redirect = CompileRedirect(backend, None, before_compile=applier.before_compile if applier else None,
                               wrap=timer.wrap)
    if applier is not None:
        applier.before_script()
    with _script_exit_status() as status, redirect:
        runpy.run_path(script, run_name="__main__")
    if status.code == ExitCode.MATCH:
        timer.finish(out)
    sys.stdout.flush()
    return status.code


class _ExitStatus:
    """The child's exit status: 0 when the script finished (or exited 0), 3 when it raised, exited with
    another status or was interrupted."""

    code: int = ExitCode.MATCH


@contextlib.contextmanager
def _script_exit_status() -> Iterator[_ExitStatus]:
    """Runs the script's block; what it raised becomes the status (said on stderr), never an exception."""
    status = _ExitStatus()
    try:
        yield status
    except SystemExit as e:
        if e.code not in (None, 0):
            print(f"tracediff: the script exited with status {e.code}", file=sys.stderr)
            status.code = ExitCode.RUN_FAILED
    except KeyboardInterrupt:  # Ctrl-C passed on by the launcher: the footer says so, no traceback needed
        print("tracediff: the script was interrupted", file=sys.stderr)
        status.code = ExitCode.RUN_FAILED
    except BaseException:  # noqa: BLE001 - the user's script may raise anything; report it
        traceback.print_exc()
        status.code = ExitCode.RUN_FAILED

if __name__ == "__main__":
    sys.exit(main())
