"""Where a recorded op's host time goes, phase by phase of `TraceRecorder._dispatch`, on a real model.

    python bench/dispatch_phases.py hf_gpt2_host                 # CPU, ops as cheap as a GPU host's
    python bench/dispatch_phases.py hf_gpt2 --device cuda         # the H100 workload, eager

Copies tracediff/ into a temporary directory and marks the phases of `_dispatch` there with clocks (text
edits, each checked to apply exactly once: an edited `_dispatch` makes this fail, never time the wrong span),
then imports that copy, records a warm-up and `--calls` calls of the workload in one session and prints:
- each phase's time per op (finding the op's facts, its tensor arguments, describing the inputs, running the
  op, describing the outputs, writing the record) and per call;
- the inclusive time per call of the recorder's parts (bench/record_ablation.py's list, and the device
  fingerprints' waits);
- which tensors took `DeviceFingerprints.submit` rather than the queue's fast entry, and why (CUDA).
The clocks cost about 0.1 us each (eight per op, one per timed call). record_ablation.py gives what each part
costs by switching it off instead.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

# (phase name, text in `_dispatch` a mark goes before or after). Each mark reads the clock and adds the time since
# the previous one to its phase.
PHASES = ("op facts", "tensor arguments", "describe inputs", "writes, host waits", "run the op",
          "outputs, views, collectives", "describe outputs", "write the record")
_EDITS = (
    ("        info = None if self._internal else",
     "        _c = _CLOCK; _t = _c(); _p = _PHASES\n        info = None if self._internal else"),
    ("        tensor_args = _tensor_arguments(info, args, kwargs)\n",
     "        _t1 = _c(); _p[0] += _t1 - _t; _t = _t1\n        tensor_args = _tensor_arguments(info, args, kwargs)\n"),
    ("        self._internal = True\n        try:\n            inputs = [",
     "        _t1 = _c(); _p[1] += _t1 - _t; _t = _t1\n        self._internal = True\n        try:\n            inputs = ["),
    ("            written = {identity(t): _version(t)",
     "            _t1 = _c(); _p[2] += _t1 - _t; _t = _t1\n            written = {identity(t): _version(t)"),
    ("        result = func(*args, **kwargs)\n\n",
     "        _t1 = _c(); _p[3] += _t1 - _t; _t = _t1\n        result = func(*args, **kwargs)\n"
     "        _t1 = _c(); _p[4] += _t1 - _t; _t = _t1\n\n"),
    ("            if info.collective in (\"work\", \"functional\"):\n                outputs = self._pending",
     "            _t1 = _c(); _p[5] += _t1 - _t; _t = _t1\n"
     "            if info.collective in (\"work\", \"functional\"):\n                outputs = self._pending"),
    ("            self._write_op(info, args, kwargs, inputs, outputs)\n",
     "            _t1 = _c(); _p[6] += _t1 - _t; _t = _t1\n"
     "            self._write_op(info, args, kwargs, inputs, outputs)\n"
     "            _p[7] += _c() - _t; _p[8] += 1\n"),
    ("# Records held back before", "import time as _time\n\n_CLOCK = _time.perf_counter\n"
     f"_PHASES = [0.0] * {len(PHASES) + 1}  # seconds per phase, then the ops timed\n\n# Records held back before"),
)


def _marked_copy(into: Path) -> None:
    """tracediff/ copied into `into`, its `_dispatch` marked by phase."""
    shutil.copytree(ROOT / "tracediff", into / "tracediff", ignore=shutil.ignore_patterns("__pycache__"))
    mode = into / "tracediff" / "record" / "mode.py"
    text = mode.read_text()
    for old, new in _EDITS:
        if text.count(old) != 1:
            raise SystemExit(f"dispatch_phases: `_dispatch` changed, update the marks: {old.strip()[:60]!r}")
        text = text.replace(old, new)
    mode.write_text(text)


def _why_submit(counts: collections.Counter[str]) -> Any:
    """A `DeviceFingerprints.submit` that counts each call by why the fast entry did not take the tensor."""
    from tracediff.record.fingerprints.device import DeviceFingerprints

    original = DeviceFingerprints.submit

    def submit(self: Any, t: Any) -> Any:
        queue = self._queue
        why = ("no open queue" if queue is None else "another dtype" if t.dtype != queue.dtype
               else "strided" if not t.is_contiguous() else "larger than a queue, or other")
        counts[f"{why}: {str(t.dtype).removeprefix('torch.')} {tuple(t.shape)}"] += 1
        return original(self, t)

    return submit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--calls", type=int, default=20)
    options = parser.parse_args()
    copy = Path(tempfile.mkdtemp(prefix="tracediff-phases-"))
    _marked_copy(copy)
    sys.path[:0] = [str(copy), str(BENCH)]
    import tracediff

    assert Path(tracediff.__file__).is_relative_to(copy), tracediff.__file__
    mode = importlib.import_module("tracediff.record.mode")
    import workloads
    from op_host_cost import patched
    from record_ablation import timed_parts, timers
    from timing import synchronizer

    parts = timed_parts(options.device) + [(mode.TraceRecorder, "before_host_wait")]
    spent, patches = timers(parts)
    submits: collections.Counter[str] = collections.Counter()
    if options.device.startswith("cuda"):
        from tracediff.record.fingerprints.device import DeviceFingerprints

        patches.append((DeviceFingerprints, "submit", _why_submit(submits)))
    fn = workloads.make(options.workload, device=options.device)
    sync = synchronizer(options.device)
    fn()
    sync()
    host = 0.0
    with patched(patches), tracediff.record(copy / "t.jsonl"):
        fn()
        sync()
        mode._PHASES[:] = [0.0] * len(mode._PHASES)
        for cell in spent.values():
            cell[:] = [0.0, 0]
        submits.clear()
        for _ in range(options.calls):
            start = time.perf_counter()
            fn()
            host += time.perf_counter() - start
            sync()
    calls, ops = options.calls, mode._PHASES[-1]
    print(f"{options.workload} on {options.device}: {ops / calls:.0f} recorded ops per call, host {host / calls * 1e3:.2f} "
          f"ms per call until it returns ({calls} calls in one session)")
    for name, seconds in zip(PHASES, mode._PHASES):
        print(f"  {name:30s} {seconds / ops * 1e6:7.2f} us per op  {seconds / calls * 1e3:6.2f} ms per call")
    total = sum(mode._PHASES[:-1])
    print(f"  {'in _dispatch':30s} {total / ops * 1e6:7.2f} us per op  {total / calls * 1e3:6.2f} ms per call")
    print("inclusive time of the recorder's parts:")
    for name, (seconds, count) in sorted(spent.items(), key=lambda kv: -kv[1][0]):
        if count:
            print(f"  {name:36s} {seconds / calls * 1e3:6.2f} ms per call  {count / calls:6.1f} calls  "
                  f"{seconds / count * 1e6:7.1f} us each")
    if submits:
        print("tensors `submit` took, per call, and why the queue's fast entry did not:")
        for what, count in submits.most_common():
            print(f"  {count / calls:6.1f}  {what}")
    shutil.rmtree(copy, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
