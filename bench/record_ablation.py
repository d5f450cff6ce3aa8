"""Where recording's time goes on a real model: the same workload recorded whole and with one part of the
recorder switched off at a time, next to plain calls and a dispatch mode that only runs each op.

    python bench/record_ablation.py hf_gpt2                 # CPU size
    python bench/record_ablation.py hf_gpt2 --device cuda   # GPU size, eager

Each variant runs as `tracediff run` records a script: one session around a warm-up call and `--calls` timed
calls. Rounds take the variants in turn, so noise hits them alike; medians over every timed call. A call is
timed to a synchronize after it on CUDA; 'host' is the time until the call returns. Unlike cProfile, which
slows every Python call and so inflates code that makes many small ones, the differences between variants are
what each part costs at full speed. Switching a part off is a diagnosis, never a mode: the trace it writes is
not a valid one.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from op_host_cost import RunEachOp, patched  # noqa: E402
from timing import synchronizer, timed_calls  # noqa: E402

import tracediff  # noqa: E402
from tracediff.record.held_records import HeldRecords  # noqa: E402
from tracediff.record.mode import TraceRecorder  # noqa: E402
from tracediff.record.modules import ModuleStack  # noqa: E402
from tracediff.record.source import SourceFinder  # noqa: E402
from tracediff.record.tensor_describer import TensorDescriber  # noqa: E402
from tracediff.trace.writer import TraceWriter  # noqa: E402


def _no_module_hooks(self: ModuleStack) -> ModuleStack:
    return self


# Parts switched off, cumulatively down the list: (variant, [(class, attribute, replacement)]).
_NO_FINGERPRINTS = [(TraceRecorder, "_fingerprint", lambda self, t: None)]
_NO_MODULES = [(ModuleStack, "__enter__", _no_module_hooks)]
_NO_SOURCES = [(SourceFinder, "find", lambda self, frame: (None, None, False))]
_NO_WRITING = [(TraceRecorder, "_write_op", lambda self, *a: None)]
_NO_ENCODING = [(TraceWriter, "write", lambda self, record: None)]
VARIANTS: dict[str, list[tuple[type, str, Any]]] = {
    "recorded": [],
    "without fingerprints": _NO_FINGERPRINTS,
    "  and without module hooks": _NO_FINGERPRINTS + _NO_MODULES,
    "  and without source lines": _NO_FINGERPRINTS + _NO_MODULES + _NO_SOURCES,
    "  and without writing records": _NO_FINGERPRINTS + _NO_MODULES + _NO_SOURCES + _NO_WRITING,
    "without module hooks only": _NO_MODULES,
    "without source lines only": _NO_SOURCES,
    "records built, not encoded or written": _NO_ENCODING,
}


def timed_parts(device: str) -> list[tuple[type, str]]:
    """The recorder's functions `--timers` times (inclusive: a function's time includes what it calls)."""
    from tracediff.record.fingerprints.device import DeviceFingerprints
    from tracediff.record.fingerprints.host_stats import HostStats

    parts: list[tuple[type, str]] = [
        (TraceRecorder, "_dispatch"), (TensorDescriber, "describe"), (TraceRecorder, "_fingerprint"),
        (TraceRecorder, "_write_op"), (HeldRecords, "write_arrived"), (HeldRecords, "make_room"),
        (SourceFinder, "find"), (ModuleStack, "_enter"), (ModuleStack, "_exit"), (TraceWriter, "write"),
        (DeviceFingerprints, "submit"), (DeviceFingerprints, "flush"), (DeviceFingerprints, "seal"),
        (DeviceFingerprints, "poll"), (DeviceFingerprints, "_read_oldest"), (HostStats, "stats"),
    ]
    if device.startswith("cuda"):
        from tracediff.record.fingerprints.kernel import Launcher

        parts += [(Launcher, "many"), (Launcher, "__call__")]
    return parts


def timers(parts: list[tuple[type, str]]) -> tuple[dict[str, list[float]], list[tuple[type, str, Any]]]:
    """Patches wrapping each part with an accumulating clock: [seconds, calls] per part."""
    spent: dict[str, list[float]] = {}
    patches = []
    for cls, name in parts:
        original = cls.__dict__[name]
        cell = spent[f"{cls.__name__}.{name}"] = [0.0, 0]

        def timed(*args: Any, _original: Any = original, _cell: list[float] = cell, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                _cell[0] += time.perf_counter() - start
                _cell[1] += 1

        patches.append((cls, name, timed))
    return spent, patches


def _print_timers(fn: Callable[[], Any], sync: Callable[[], Any], trace: Path, device: str, calls: int) -> None:
    spent, patches = timers(timed_parts(device))
    with patched(patches), tracediff.record(trace):
        fn()
        sync()
        for cell in spent.values():
            cell[0], cell[1] = 0.0, 0
        for _ in range(calls):
            fn()
            sync()
    print(f"inclusive time per call in the recorder's parts ({calls} calls, each to a synchronize; the clocks "
          f"themselves add about a microsecond per timed call):")
    for name, (seconds, count) in sorted(spent.items(), key=lambda kv: -kv[1][0]):
        if count:
            print(f"  {name:34s} {seconds / calls * 1e3:7.2f} ms  {count / calls:7.1f} calls  "
                  f"{seconds / count * 1e6:6.1f} us each")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4, help="timed calls per session")
    parser.add_argument("--timers", action="store_true",
                        help="also: the time spent in each of the recorder's main functions, per call")
    options = parser.parse_args()
    import workloads

    fn = workloads.make(options.workload, device=options.device)
    variants = dict(VARIANTS)
    if options.device.startswith("cuda"):  # the device fingerprints' parts: their placeholders, queue, launches
        from tracediff.record.fingerprints.device import DeviceFingerprints
        from tracediff.record.fingerprints.kernel import _DirectLaunches

        variants["fingerprints: a placeholder each, no queue"] = [(DeviceFingerprints, "submit", lambda self, t: {})]
        variants["fingerprints: queued, never launched"] = [(_DirectLaunches, "__call__", lambda self, *a: None)]
    sync = synchronizer(options.device)
    trace = Path(tempfile.mkdtemp(prefix="tracediff-ablation-")) / "t.jsonl"
    sessions: dict[str, Callable[[], Any]] = {
        "plain": contextlib.nullcontext,
        "a dispatch mode that runs each op": RunEachOp,
        **{name: (lambda patches=patches: _session(trace, patches)) for name, patches in variants.items()},
    }
    total: dict[str, list[float]] = {name: [] for name in sessions}
    host: dict[str, list[float]] = {name: [] for name in sessions}
    records = 0.0
    for _ in range(2):
        fn()
    sync()
    for _ in range(options.rounds):
        for name, session in sessions.items():
            with session() as entered:
                fn()
                sync()
                before = entered.recorder.ops + entered.recorder.kernels if name == "recorded" else 0
                hosts, totals = timed_calls(fn, sync, options.calls)
                host[name] += hosts
                total[name] += totals
                if name == "recorded":
                    records = (entered.recorder.ops + entered.recorder.kernels - before) / options.calls
    plain = statistics.median(total["plain"])
    print(f"{options.workload} on {options.device}: {records:.0f} records per call; median ms per call "
          f"({options.rounds} rounds of {options.calls} calls), host ms until it returns, and us per record over plain")
    for name in sessions:
        t, h = statistics.median(total[name]), statistics.median(host[name])
        print(f"  {name:34s} {t * 1e3:8.2f} ms ({t / plain:.2f}x)  host {h * 1e3:7.2f} ms  "
              f"{(t - plain) / max(records, 1) * 1e6:7.1f} us per record")
    if options.timers:
        _print_timers(fn, sync, trace, options.device, options.calls * options.rounds)
    return 0


@contextlib.contextmanager
def _session(trace: Path, patches: list[tuple[type, str, Any]]) -> Iterator[Any]:
    with patched(patches), tracediff.record(trace) as session:
        yield session


if __name__ == "__main__":
    sys.exit(main())
