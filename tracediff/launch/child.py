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

    sys.argv = [script, *script_args]
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
    )
    try:
        with materialize, upcast, session:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code in (None, 0):
            return ExitCode.MATCH
        print(f"tracediff: the script exited with status {e.code}", file=sys.stderr)
        return ExitCode.RUN_FAILED
    except KeyboardInterrupt:  # Ctrl-C passed on by the launcher: the footer says so, no traceback needed
        print("tracediff: the script was interrupted", file=sys.stderr)
        return ExitCode.RUN_FAILED
    except BaseException:  # noqa: BLE001 - the user's script may raise anything; report it
        traceback.print_exc()
        return ExitCode.RUN_FAILED
    finally:
        if capture is not None and options.capture_out:
            capture.save(options.capture_out)
        sys.stdout.flush()
    return ExitCode.MATCH


if __name__ == "__main__":
    sys.exit(main())
