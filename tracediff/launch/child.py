"""Child process entry: run one script under the recorder with one backend.

    python -m tracediff.launch.child --backend inductor --out a.jsonl -- script.py ARGS...

The script runs as `__main__` with its own argv and its directory first on
sys.path, as `python script.py` would. Exit status: 0 when the script
finished, 3 when it raised (the trace's footer holds the exception), 2 for
bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracediff.errors import ExitCode, UserError
from tracediff.outputs import rank_path


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tracediff.launch.child")
    parser.add_argument("--backend", default=None, help="backend name; omitted: as the script wrote it")
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-rank", action="store_true",
                        help="under torch's launcher: write --out with the rank in its name (t.rank1.jsonl)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-seed", action="store_true")
    parser.add_argument("--exact", action="store_true")
    parser.add_argument("--fallback-random", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--materialize", action="store_true",
                        help="inductor: one kernel per op, every intermediate in a buffer (narrowing)")
    parser.add_argument("--capture", default=None, metavar="INDICES",
                        help="repro: keep the arguments of the ops recorded at these comma-separated indices")
    parser.add_argument("--capture-out", default=None, help="repro: where the kept arguments go (torch.save)")
    parser.add_argument("--float64", action="store_true",
                        help="compute every floating op in float64 (the noise reference of --calibrate)")
    parser.add_argument("--fix", default=None, metavar="JSON",
                        help="`tracediff fix`: the changes to make (record/fix_changes.py), as JSON")
    parser.add_argument("--time-out", default=None, metavar="PATH",
                        help="`tracediff fix`: run unrecorded, time each compiled call, write the times to PATH "
                             "(--out is then unused)")
    parser.add_argument("--judge", action="store_true",
                        help="judge each compiled call on its own inputs, against eager and float64 (record/judging/)")
    parser.add_argument("--light", action="store_true",
                        help="record no op, only compiled calls and checks; --judge then judges within a time budget")
    parser.add_argument("--window", default=None, metavar="REGION@CALL",
                        help="record ops (and judge calls) only inside this call of a compiled region, e.g. Net.forward@57")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
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
        backend = resolve_backend(options.backend) if options.backend else None
    except UserError as e:
        print(f"tracediff: {e}", file=sys.stderr)
        return ExitCode.USAGE
    fallback_random = {"auto": None, "on": True, "off": False}[options.fallback_random]
    applier = None
    if options.fix:
        from tracediff.record.fix_apply import FixApplier
        from tracediff.record.fix_changes import decode

        applier = FixApplier(decode(options.fix))

    try:
        scope, policy = _scope_and_policy(options)
    except UserError as e:
        print(f"tracediff: {e}", file=sys.stderr)
        return ExitCode.USAGE
    sys.argv = [script, *script_args]
    if options.time_out:
        return _run_timed(script, backend, fallback_random, None if options.no_seed else options.seed, applier,
                          Path(options.time_out))
    materialize: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if options.materialize:
        from tracediff.record.materialize import materialize_all

        materialize = materialize_all()
    capture = None
    if options.capture:
        from tracediff.record.capture import ArgumentCapture

        capture = ArgumentCapture({int(i) for i in options.capture.split(",")})
    upcast: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if options.float64:
        from tracediff.record.upcast import Float64Upcast

        upcast = Float64Upcast()  # entered before the recorder, so the recorder sees the program's ops
    session = RecordingSession(
        rank_path(Path(options.out)) if options.per_rank else options.out,
        backend=backend,
        seed=None if options.no_seed else options.seed,
        exact=options.exact,
        fallback_random=fallback_random,
        command=[options.script, *script_args],
        materialized=options.materialize,
        script_dir=os.path.dirname(script),
        recorder_factory=capture.recorder if capture else None,
        upcast="float64" if options.float64 else None,
        before_compile=applier.before_compile if applier else None,
        judge=policy,
        scope=scope,
    )
    if applier is not None:
        applier.before_script()
    try:
        with _script_exit_status() as status, materialize, upcast, session:
            runpy.run_path(script, run_name="__main__")
    finally:
        if capture is not None and options.capture_out:
            capture.save(options.capture_out)
        if applier is not None:
            applier.report_unmade()
        sys.stdout.flush()
    return status.code


def _scope_and_policy(options: argparse.Namespace) -> tuple[Any, Any]:
    """Which ops the recording keeps (record/scope.py), and which compiled calls are judged (None: none)."""
    from tracediff.record.judging.policy import InWindow, JudgePolicy, TimeBudget
    from tracediff.record.scope import CallWindow, RecordScope

    if options.light and options.window:
        raise UserError("--light and --window exclude each other")
    if options.window:
        window = CallWindow.parse(options.window)
        return RecordScope("window", window), InWindow(window) if options.judge else None
    if options.light:
        return RecordScope("calls"), TimeBudget() if options.judge else None
    return RecordScope(), JudgePolicy() if options.judge else None


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
