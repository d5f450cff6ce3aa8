"""How far the fingerprint's sketch misjudges real differences: estimate / exact L2 distance.

    python bench/localize/sketch_error.py bench/out/localize-cpu     # a benchmark run's --work folder

For every fault the run saved results of (`b.pt`, beside the model's eager `reference/a.pt`), each result's
difference from eager is sketched as the recorder does (record/fingerprints/fingerprint.py: signed sums of the values
folded by SKETCH_PERIOD) with the first 4, 8 and SKETCH_WIDTH sign patterns, and the estimated distance is
divided by the exact one. Prints quantiles per width: a low quantile far under 1 means differences beyond
the tolerance pass as within it.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from tracediff.record.fingerprints.fingerprint import SKETCH_PERIOD, SKETCH_WIDTH, sketch_signs


def ratios(work: Path, widths: tuple[int, ...]) -> dict[int, list[float]]:
    signs = sketch_signs()
    found: dict[int, list[float]] = {w: [] for w in widths}
    for faulty in sorted(work.glob("*/*/g*/b.pt")):
        reference = faulty.parents[2] / "reference" / "a.pt"
        if not reference.is_file():
            continue
        for a, b in zip(torch.load(reference, map_location="cpu"), torch.load(faulty, map_location="cpu")):
            d = (a.double() - b.double()).flatten()
            if d.numel() < 16 or not torch.isfinite(d).all() or not d.any():
                continue
            rows, tail = divmod(d.numel(), SKETCH_PERIOD)
            folded = torch.zeros(SKETCH_PERIOD, dtype=torch.float64)
            if rows:
                folded += d[: rows * SKETCH_PERIOD].view(rows, SKETCH_PERIOD).sum(0)
            folded[:tail] += d[rows * SKETCH_PERIOD:]
            sums, exact = folded @ signs, float(d.norm())
            for width in widths:
                found[width].append(math.sqrt(float((sums[:width] ** 2).mean())) / exact)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", nargs="+", type=Path, help="a localization run's work folder(s)")
    args = parser.parse_args()
    widths = tuple(sorted({4, 8, SKETCH_WIDTH}))
    merged: dict[int, list[float]] = {w: [] for w in widths}
    for work in args.work:
        for width, values in ratios(work, widths).items():
            merged[width] += values
    for width, values in merged.items():
        if not values:
            print("no saved results found")
            return
        q = torch.tensor(values).quantile(torch.tensor([0.01, 0.05, 0.5, 0.95])).tolist()
        under = sum(v < 0.7 for v in values) / len(values)
        print(f"{width:>2} sums, {len(values)} differences: 1% {q[0]:.2f}, 5% {q[1]:.2f}, median {q[2]:.2f}, "
              f"95% {q[3]:.2f}; under 0.7x: {100 * under:.1f}%")


if __name__ == "__main__":
    main()
