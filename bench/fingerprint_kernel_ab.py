"""The device fingerprint kernel against `x.sum()` and, optionally, against another version of it.

    python3 bench/fingerprint_kernel_ab.py [OLD_KERNEL_MODULE.py]
    # e.g. git show 43504d9:tracediff/record/fingerprints/kernel.py > /tmp/old_kernel.py

For sizes from 1000 elements to GPT-2's logits (206M): device time per launch (CUDA events, 20
launches) and the largest difference from the host's fingerprint (or from the old kernel's past 8M
elements), and whether the two kernels' partials are the same bits. The host time of one `DeviceFingerprints.submit`: `bench/gpu.py --micro`. Needs CUDA and Triton.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from gpu import device_ms  # noqa: E402

from tracediff.record.fingerprints import kernel as new  # noqa: E402
from tracediff.record.fingerprints.device import PROGRAMS, reduce_partials  # noqa: E402
from tracediff.record.fingerprints.fingerprint import fingerprint, from_stats  # noqa: E402

SIZES = (1000, 4099, 5000, 2**20, 8 * 1024 * 768, 8 * 512 * 3072, 8 * 512 * 50257)


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("old_fingerprint_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    kernels = {"new": new, **({"old": _load(sys.argv[1])} if len(sys.argv) > 1 else {})}
    for n in SIZES:
        x = torch.randn(n, device="cuda") * 3 + 0.1
        if n == 5000:
            x[7], x[99] = float("nan"), float("inf")
        line = f"n={n:>10d}  x.sum() {device_ms(lambda: x.sum()):.3f} ms"  # noqa: B023 (called at once)
        results, partials = {}, {}
        for name, module in kernels.items():
            out = torch.zeros((1, PROGRAMS, module.STATS), dtype=torch.float64, device="cuda")
            launch = module.Launcher()
            launch(x, out, 0)
            results[name] = from_stats(reduce_partials(out)[0].tolist(), n)
            partials[name] = out.clone()
            line += f"  {name} {device_ms(lambda: launch(x, out, 0)):.3f} ms"  # noqa: B023 (called at once)
        reference = fingerprint(x.cpu()) if n <= 2**23 else results.get("old")
        if reference is not None:
            a = results["new"]
            scale = max(reference["l1"], 1e-30)
            worst = max(abs(a["sum"] - reference["sum"]) / scale, abs(a["l1"] - reference["l1"]) / scale,
                        abs(a["l2"] - reference["l2"]) / max(reference["l2"], 1e-30),
                        max(abs(u - v) for u, v in zip(a["sk"], reference["sk"])) / max(reference["l2"], 1e-30))
            line += f"  largest relative difference from {'the host' if n <= 2**23 else 'old'}: {worst:.1e}"
        if "old" in partials:
            line += "  partials: " + ("the same bits" if torch.equal(partials["new"], partials["old"]) else "DIFFERENT")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
