"""Benchmark `tracediff.diff.sequence.align_sequences` on 1M-key recordings.

Run from the repository root:  python bench/bench_sequence.py [--n 1000000] [--edits 500]

Every case is timed with time.perf_counter (tracemalloc off; best of --repeat calls) and its result
checked (pairs strictly increasing, a[i] == b[j]); it is then run again under
tracemalloc for the peak traced memory of the call (inputs excluded: they are
built before tracing starts; the returned pair list, about 112 bytes a pair, is
included and also shown on its own). LCS column: the known optimum, or a lower
bound (">=": elements no edit touched), or "?" where unknown.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc
from collections.abc import Hashable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracediff.diff.sequence import align_sequences  # noqa: E402

Key = Hashable

OPS = [
    "aten::addmm", "aten::mm", "aten::bmm", "aten::add", "aten::mul", "aten::div", "aten::sub",
    "aten::gelu", "aten::relu", "aten::silu", "aten::softmax", "aten::_softmax", "aten::layer_norm",
    "aten::native_layer_norm", "aten::view", "aten::reshape", "aten::transpose", "aten::permute",
    "aten::t", "aten::clone", "aten::contiguous", "aten::expand", "aten::cat", "aten::split",
    "aten::embedding", "aten::dropout", "aten::rsqrt", "aten::pow", "aten::mean", "aten::sum",
    "aten::copy_", "aten::to", "aten::_to_copy", "aten::empty", "aten::zeros", "aten::masked_fill",
    "aten::where", "aten::scaled_dot_product_attention", "aten::cos", "aten::sin",
]
SHAPES = [(4, 4), (4, 8), (8, 8), (16, 64), (64, 64), (2, 16, 64), (2, 4, 16, 16), (128,)]


def vocabulary(rng: random.Random, size: int = 300) -> list[Key]:
    """About `size` distinct op-like keys: (op name, (input shapes...))."""
    keys: set[Key] = set()
    while len(keys) < size:
        op = rng.choice(OPS)
        arity = rng.randint(1, 3)
        keys.add((op, tuple(rng.choice(SHAPES) for _ in range(arity))))
    return sorted(keys)


def iid_trace(rng: random.Random, vocab: list[Key], n: int) -> list[Key]:
    """Keys drawn independently (Zipf-ish weights, like real op mixes)."""
    weights = [1.0 / (r + 1) ** 0.8 for r in range(len(vocab))]
    return rng.choices(vocab, weights=weights, k=n)


def layered_trace(rng: random.Random, vocab: list[Key], n: int) -> list[Key]:
    """Repeated 'layer' templates (40-120 ops each), the shape of real model traces."""
    templates = [[rng.choice(vocab) for _ in range(rng.randint(40, 120))] for _ in range(12)]
    out: list[Key] = []
    while len(out) < n:
        out.extend(templates[rng.randrange(len(templates))])
    del out[n:]
    return out


def edited(rng: random.Random, seq: list[Key], vocab: list[Key], edits: int) -> tuple[list[Key], int]:
    """A copy of `seq` with `edits` random insertions/deletions/substitutions (some renamed to new keys).

    Also returns a lower bound on the LCS: the number of original elements left untouched.
    """
    out = list(seq)
    touched: set[int] = set()
    positions = sorted(rng.sample(range(len(seq)), edits), reverse=True)
    for pos in positions:  # back to front, so earlier positions stay valid
        kind = rng.randrange(3)
        new = rng.choice(vocab) if rng.random() < 0.7 else (f"aten::renamed_{rng.randrange(50)}", ())
        if kind == 0:
            out.insert(pos, new)
        elif kind == 1:
            del out[pos]
            touched.add(pos)
        else:
            out[pos] = new
            touched.add(pos)
    return out, len(seq) - len(touched)


def measure(a: Sequence[Key], b: Sequence[Key], repeat: int) -> tuple[float, float, float, int]:
    """(best seconds, peak traced MiB, MiB held by the returned list alone, pair count); checks invariants."""
    dt = float("inf")
    for _ in range(repeat):
        res = None
        gc.collect()
        t0 = time.perf_counter()
        res = align_sequences(a, b)
        dt = min(dt, time.perf_counter() - t0)
    check(a, b, res)
    pairs = len(res)
    # The returned list: its pointer array plus, per pair, a 2-tuple and two ints (small ints are shared).
    result_mib = (sys.getsizeof(res) + pairs * (sys.getsizeof((0, 0)) + 2 * sys.getsizeof(10**6))) / 2**20
    del res
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    res = align_sequences(a, b)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del res
    return dt, peak / 2**20, result_mib, pairs


def check(a: Sequence[Key], b: Sequence[Key], pairs: list[tuple[int, int]]) -> None:
    pi = pj = -1
    for i, j in pairs:
        assert i > pi and j > pj and a[i] == b[j]
        pi, pj = i, j


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--edits", type=int, default=500)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--repeat", type=int, default=3, help="timed calls per case; the best is shown")
    args = ap.parse_args()
    n, rng = args.n, random.Random(args.seed)
    vocab = vocabulary(rng)

    cases: list[tuple[str, list[Key], list[Key], str]] = []
    base = iid_trace(rng, vocab, n)
    other, lb = edited(rng, base, vocab, args.edits)
    cases.append((f"iid keys, {args.edits} edits", base, other, f">= {lb}"))
    layers = layered_trace(rng, vocab, n)
    other2, lb2 = edited(rng, layers, vocab, args.edits)
    cases.append((f"layered trace, {args.edits} edits", layers, other2, f">= {lb2}"))
    cases.append(("identical", base, list(base), str(n)))
    block = [("aten::inserted", (rng.randrange(1000),)) for _ in range(20_000)]
    mid = n // 2
    cases.append(("20k-op block inserted", layers, layers[:mid] + block + layers[mid:], str(n)))
    x = ("aten::add", ((4, 4),))
    cases.append(("all one key (n vs n-37)", [x] * n, [x] * (n - 37), str(n - 37)))
    y = ("aten::mul", ((4, 4),))
    cases.append(("one key vs other, swapped halves", [x] * (n // 2) + [y] * (n // 2),
                  [y] * (n // 2) + [x] * (n // 2), str(n // 2)))
    cases.append(("disjoint key sets", base, [(k[0] + "_b", k[1]) for k in base], "0"))
    cases.append(("unrelated, same 300 keys", base, iid_trace(random.Random(7), vocab, n), "?"))

    print(f"python {sys.version.split()[0]}, n = {n:,}; time: perf_counter, best of {args.repeat} calls; "
          f"peak: tracemalloc, separate call; 'result' = memory of the returned list itself")
    header = (f"{'case':34} {'len a':>9} {'len b':>9} {'pairs':>9} {'LCS':>11} {'time s':>7} "
              f"{'peak MiB':>9} {'result MiB':>10}")
    print(header)
    print("-" * len(header))
    for name, a, b, lcs in cases:
        dt, peak, result_mib, pairs = measure(a, b, args.repeat)
        print(f"{name:34} {len(a):>9,} {len(b):>9,} {pairs:>9,} {lcs:>11} {dt:>7.2f} {peak:>9.1f} {result_mib:>10.1f}",
              flush=True)


if __name__ == "__main__":
    main()
