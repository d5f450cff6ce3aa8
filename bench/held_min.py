"""Recording's Python on the GPU's hot path, the fastest of 40 calls: records held as on a GPU (written when the
host waits), no fingerprints, a tiny Hugging Face GPT-2 (6 layers, width 64, 2 x 8 tokens) on CPU, one thread.
Each call gets a session of its own (one warm-up call in it); plain calls are interleaved. The fastest call is the
one least disturbed by the rest of a shared machine, so compare trees by running this alternately:

    python bench/held_min.py                                          # this tree
    cd OTHER_TREE && PYTHONPATH=$PWD python /path/to/bench/held_min.py   # another (tracediff from PYTHONPATH)
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

import tracediff
from tracediff.record import mode as recorder_module
from tracediff.record.device_fingerprints import DeviceFingerprints
from tracediff.record.mode import TraceRecorder


def main() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    recorder_module.HELD_RECORDS = 10**6

    def held(self: TraceRecorder, t: torch.Tensor) -> None:
        if self.device_fingerprints is None:
            self.device_fingerprints = DeviceFingerprints()  # its presence holds the records back
        return None

    TraceRecorder._fingerprint = held  # type: ignore[method-assign]
    torch.set_num_threads(1)
    config = GPT2Config(n_layer=6, n_embd=64, n_head=4, vocab_size=128, n_positions=16)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 128, (2, 8))

    def forward() -> torch.Tensor:
        with torch.no_grad():
            return model(input_ids=ids).logits

    trace = Path(tempfile.mkdtemp(prefix="tracediff-heldmin-")) / "t.jsonl"
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
    print(f"{Path(tracediff.__file__).parent.parent.name}: fastest plain {p * 1e3:.2f} ms, recorded {r * 1e3:.2f} ms, "
          f"{records:.0f} records per call, {(r - p) / records * 1e6:.1f} us per record")


if __name__ == "__main__":
    main()
