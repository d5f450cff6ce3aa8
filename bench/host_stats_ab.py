"""One CPU fingerprint, this tree against another version, alternated in one process, size by size.

    python bench/host_stats_ab.py a35d946          # against a commit (git archive)
    python bench/host_stats_ab.py /tmp/old_tree    # against a tree holding tracediff/

Each tensor is first written by a torch op (`torch.mul(..., out=x)`, over torch's threads), as a recorded op's
output is just before its fingerprint, then fingerprinted by `fingerprint()` with a scratch, as the recorder calls
it; only the fingerprint is timed. The versions take turns call by call. Prints the median microseconds per size,
their ratio, and whether both gave the same fingerprint within 1e-6 of its scale (they need not be bitwise equal:
a version may sum in another order).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from record_ab import OLD_NAME, install_old  # noqa: E402

# (label, shape, how to take the tensor fingerprinted from the written buffer)
CASES: list[tuple[str, tuple[int, ...], Callable[[Any], Any]]] = [
    ("512", (512,), lambda x: x),
    ("4099", (4099,), lambda x: x),
    ("32768", (32768,), lambda x: x),
    ("131072 (512 KiB)", (131072,), lambda x: x),
    ("524288 (2 MiB)", (524288,), lambda x: x),
    ("2097152 (8 MiB)", (2097152,), lambda x: x),
    ("a third of [4,128,768], strided", (4, 128, 768), lambda x: x[..., 256:512]),
    ("its heads, transposed", (4, 128, 768), lambda x: x[..., :256].reshape(4, 128, 4, 64).transpose(1, 2)),
]


def _close(a: dict[str, Any], b: dict[str, Any]) -> bool:
    scale = abs(b["l1"]) + 1e-30
    pairs = [(a[k], b[k]) for k in ("sum", "l1", "l2", "max")] + list(zip(a["sk"], b["sk"]))
    return all(abs(x - y) <= 1e-6 * scale for x, y in pairs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="a commit, or a directory holding the other version's tracediff/")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per size and version")
    options = parser.parse_args()
    scratch_dir = Path(tempfile.mkdtemp(prefix="tracediff-ab-"))
    install_old(options.old, scratch_dir)
    sys.path.insert(0, str(scratch_dir))
    import torch

    from tracediff.record.fingerprints import fingerprint as new

    old = importlib.import_module(f"{OLD_NAME}.record.fingerprint")
    versions = {"this tree": (new.fingerprint, new.Scratch()), options.old: (old.fingerprint, old.Scratch())}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median us per fingerprint of a tensor "
          f"just written by a torch op ({options.calls} calls each, alternated)")
    print(f"| tensor | this tree | {options.old} | ratio | same numbers |")
    print("|---|---:|---:|---:|---|")
    for label, shape, take in CASES:
        source = torch.randn(shape, generator=torch.Generator().manual_seed(len(label)))
        buffer = torch.empty_like(source)
        times: dict[str, list[float]] = {name: [] for name in versions}
        results = {}
        for call in range(options.calls + 10):
            for name, (fingerprint, scratch) in versions.items():
                torch.mul(source, 1.0, out=buffer)
                x = take(buffer)
                start = time.perf_counter()
                results[name] = fingerprint(x, scratch=scratch)
                if call >= 10:
                    times[name].append(time.perf_counter() - start)
        ours, theirs = (statistics.median(times[name]) * 1e6 for name in versions)
        same = _close(results["this tree"], results[options.old])
        print(f"| {label} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} | {'yes' if same else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
