"""Device time of fingerprinting a strided view in place (the kernel reads it by its layout) against a contiguous
copy and a read of that copy, for views the recorder meets: GPT-2's tied embedding transposed (inductor's lm_head
argument), attention heads, a fused projection's slice. CUDA events, 20 launches each, milliseconds.

    python3 bench/strided_fingerprint.py      # needs CUDA and Triton
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from gpu import device_ms  # noqa: E402

from tracediff.record.fingerprints import kernel as fingerprint_kernel  # noqa: E402
from tracediff.record.fingerprints.device import _STATS, PROGRAMS, strided_layout  # noqa: E402


def main() -> int:
    launch = fingerprint_kernel.Launcher()
    out = torch.zeros((2, PROGRAMS, _STATS), dtype=torch.float64, device="cuda")
    views = {
        "wte.t(), 768 x 50257": torch.randn(50257, 768, device="cuda").t(),
        "attention heads, 8 x 12 x 512 x 64": torch.randn(8, 512, 12, 64, device="cuda").permute(0, 2, 1, 3),
        "k of a fused projection, 8 x 512 x 768": torch.randn(8, 512, 2304, device="cuda")[:, :, 768:1536],
        "a third of a 16 x 1024 x 12288 projection": torch.randn(16, 1024, 12288, device="cuda")[:, :, 4096:8192],
    }
    print(f"{torch.cuda.get_device_name()}: ms per fingerprint")
    for name, view in views.items():
        layout = strided_layout(view.shape, view.stride())
        copy = view.contiguous()
        in_place = device_ms(lambda: launch(view, out, 0, layout=layout))  # noqa: B023 (called at once)
        copied = device_ms(lambda: launch(view.contiguous(), out, 1))  # noqa: B023
        copy_only = device_ms(view.contiguous)
        read_only = device_ms(lambda: launch(copy, out, 1))  # noqa: B023
        print(f"  {name} ({view.numel() * view.element_size() / 2**20:.0f} MiB): in place {in_place:.3f}; "
              f"copy and read {copied:.3f} (copy {copy_only:.3f}, read {read_only:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
