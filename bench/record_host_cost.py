"""Host time recording adds per record on a tiny Hugging Face GPT-2 (6 layers, width 64, 2 x 8 tokens, CPU, one
thread), where the model's own compute is small and recording's Python shows. Plain and recorded calls are
interleaved (blocks of ten, 15 rounds, one session per block); medians.

    python bench/record_host_cost.py            # fingerprints off: the recorder's own Python
    python bench/record_host_cost.py fp         # fingerprints on (tiny host tensors)
    python bench/record_host_cost.py held       # fingerprints off, records held as on a GPU until the host waits
    python bench/record_host_cost.py nofp tottime   # and a cProfile of 20 recorded calls, sorted by own time

`held` shows the hot path of a CUDA recording, where records wait for their device fingerprints and are written
when the program next waits for the device (here: at the session's end, outside the timed calls).

    python bench/record_host_cost.py held fastest   # the fastest of 40 calls, a session each (one warm-up call in
                                                     # it), plain ones interleaved: the call least disturbed by the rest
                                                     # of a shared machine

To compare two trees, alternate runs of each tree's own copy of this script (it imports the tracediff beside it;
copy it into a tree that lacks an option).
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import tracediff  # noqa: E402
from tracediff.record import mode as recorder_module  # noqa: E402
from tracediff.record.fingerprints.device import DeviceFingerprints  # noqa: E402
from tracediff.record.mode import TraceRecorder  # noqa: E402


def main() -> int:
    from transformers import GPT2Config, GPT2LMHeadModel

    variant = sys.argv[1] if len(sys.argv) > 1 else "nofp"
    if variant == "nofp":
        TraceRecorder._fingerprint = lambda self, t: None  # type: ignore[method-assign]
    elif variant == "held":
        recorder_module.HELD_RECORDS = 10**6

        def held(self: TraceRecorder, t: torch.Tensor) -> None:
            if self.device_fingerprints is None:
                self.device_fingerprints = DeviceFingerprints()  # its presence holds the records back
            return None

        TraceRecorder._fingerprint = held  # type: ignore[method-assign]
    elif variant != "fp":
        raise SystemExit(f"unknown variant {variant!r}: nofp, fp or held")
    torch.set_num_threads(1)
    config = GPT2Config(n_layer=6, n_embd=64, n_head=4, vocab_size=128, n_positions=16)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 128, (2, 8))

    def forward() -> torch.Tensor:
        with torch.no_grad():
            return model(input_ids=ids).logits

    trace = Path(tempfile.mkdtemp(prefix="tracediff-hostcost-")) / "t.jsonl"
    if sys.argv[2:3] == ["fastest"]:
        return _fastest(variant, forward, trace)
    with tracediff.record(trace):
        forward()
    plain, recorded, records = [], [], 0.0
    for _ in range(15):
        start = time.perf_counter()
        for _ in range(10):
            forward()
        plain.append((time.perf_counter() - start) / 10)
        with tracediff.record(trace) as session:
            forward()
            start = time.perf_counter()
            for _ in range(10):
                forward()
            recorded.append((time.perf_counter() - start) / 10)
            records = session.recorder.ops / 11
    p, r = statistics.median(plain), statistics.median(recorded)
    print(f"{variant}: plain {p * 1e3:.2f} ms, recorded {r * 1e3:.2f} ms, {records:.0f} records per call, "
          f"{(r - p) / records * 1e6:.1f} us per record")
    if len(sys.argv) > 2:
        with tracediff.record(trace):
            forward()
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(20):
                forward()
            profile.disable()
        pstats.Stats(profile).sort_stats(sys.argv[2]).print_stats(40)
    return 0


def _fastest(variant: str, forward: Callable[[], object], trace: Path) -> int:
    plain, recorded, records = [], [], 0.0
    for _ in range(40):
        start = time.perf_counter()
        forward()
        plain.append(time.perf_counter() - start)
        with tracediff.record(trace) as session:
            forward()
            start = time.perf_counter()
            forward()
            recorded.append(time.perf_counter() - start)
            records = session.recorder.ops / 2
    p, r = min(plain), min(recorded)
    print(f"{Path(tracediff.__file__).parent.parent.name} {variant}: fastest plain {p * 1e3:.2f} ms, recorded "
          f"{r * 1e3:.2f} ms, {records:.0f} records per call, {(r - p) / records * 1e6:.1f} us per record")
    return 0


if __name__ == "__main__":
    sys.exit(main())
