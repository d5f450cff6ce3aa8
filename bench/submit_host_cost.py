"""Host cost of one device fingerprint's submit, alone: 4096 small CUDA tensors submitted in a loop, with and
without the kernels' launches (best of 5 rounds, microseconds per fingerprint). Next to
`bench/record_ablation.py --timers`, which times the same function inside a model's forward.

    python3 bench/submit_host_cost.py          # needs CUDA and Triton
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

TENSORS = 4096


def _per_submit(tensors: list[torch.Tensor], launch: bool) -> float:
    from tracediff.record.fingerprints.device import DeviceFingerprints

    fingerprints = DeviceFingerprints()
    if not launch:
        assert fingerprints._launch is not None
        fingerprints._launch._many = fingerprints._launch._one = _NoLaunch()  # type: ignore[assignment]
    torch.cuda.synchronize()
    start = time.perf_counter()
    for t in tensors:
        fingerprints.submit(t)
    elapsed = time.perf_counter() - start
    fingerprints.finish()
    return elapsed / len(tensors) * 1e6


class _NoLaunch:
    def __call__(self, *args: Any) -> None:
        return None


def main() -> int:
    if not torch.cuda.is_available():
        print("bench/submit_host_cost.py: no CUDA device; nothing measured", file=sys.stderr)
        return 0
    tensors = [torch.randn(16, device="cuda") for _ in range(TENSORS)]
    for launch in (True, False):
        _per_submit(tensors, launch)  # compiles the kernels, warms the allocator
        best = min(_per_submit(tensors, launch) for _ in range(5))
        print(f"submit, {'with launches' if launch else 'launches skipped'}: {best:.2f} us per fingerprint")
    return 0


if __name__ == "__main__":
    sys.exit(main())
