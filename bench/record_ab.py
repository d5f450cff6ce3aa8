"""Recorded calls of this tree's tracediff against another version's, alternated in one process.

    python bench/record_ab.py 9418bc6 hf_gpt2 --device cuda          # against a commit (git archive)
    python bench/record_ab.py /tmp/old_tree hf_gpt2 --device cuda    # against a tree holding tracediff/
    python bench/record_ab.py . hf_gpt2 --device cuda --warmup 3 --calls 10   # plain against recorded, paired

The other version's package is copied into a temporary directory as `tracediff_old`, its imports renamed, and
imported beside this tree's. Each round records `--calls` calls in a session of each (their order alternating),
after plain calls: a host's slow stretches (on the H200 lease, recorded calls ran at 30-32 ms or, for tens of
seconds at a time, at 45-60) hit both alike, where runs in separate processes may compare a quiet stretch with a
slow one. Prints each round, the medians, and in how many rounds this tree was faster.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from timing import synchronizer, timed_calls  # noqa: E402

OLD_NAME = "tracediff_old"
_IMPORT = re.compile(r"\b(from|import) tracediff\b")
_DOTTED = re.compile(r"([\"'])tracediff\.")


def install_old(version: str, into: Path) -> None:
    """Put `version`'s tracediff package (a commit, or a directory holding `tracediff/`) at `into/tracediff_old`,
    its own imports renamed to it."""
    target = into / OLD_NAME
    tree = Path(version)
    if (tree / "tracediff").is_dir():
        shutil.copytree(tree / "tracediff", target)
    else:
        archive = subprocess.run(["git", "archive", version, "tracediff"], cwd=BENCH.parent, capture_output=True,
                                 check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
        (into / "tracediff").rename(target)
    for source in target.rglob("*.py"):
        text = source.read_text()
        source.write_text(_DOTTED.sub(rf"\1{OLD_NAME}.", _IMPORT.sub(rf"\1 {OLD_NAME}", text)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="a commit, or a directory holding the other version's tracediff/")
    parser.add_argument("workload")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=5, help="timed calls per session")
    parser.add_argument("--warmup", type=int, default=1,
                        help="calls per session before the timed ones (the first reads the weights; on CUDA its records "
                             "are written in the calls after it)")
    options = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="tracediff-ab-"))
    install_old(options.old, scratch)
    sys.path.insert(0, str(scratch))
    import workloads

    import tracediff

    old = importlib.import_module(OLD_NAME)
    fn = workloads.make(options.workload, device=options.device)
    sync = synchronizer(options.device)
    for _ in range(3):
        fn()
    sync()
    sessions: dict[str, Callable[[], Any]] = {
        "plain": contextlib.nullcontext,
        "this tree": lambda: tracediff.record(scratch / "new.jsonl"),
        options.old: lambda: old.record(scratch / "old.jsonl"),
    }
    total: dict[str, list[float]] = {name: [] for name in sessions}
    host: dict[str, list[float]] = {name: [] for name in sessions}
    rounds = []
    for r in range(options.rounds):
        names = list(sessions)
        order = [names[0], *(names[1:] if r % 2 == 0 else names[:0:-1])]
        medians = {}
        for name in order:
            with sessions[name]():
                for _ in range(options.warmup):
                    fn()
                    sync()
                hosts, times = timed_calls(fn, sync, options.calls)
            host[name] += hosts
            total[name] += times
            medians[name] = statistics.median(times)
        rounds.append(medians)
        print(f"round {r}: " + "  ".join(f"{name} {ms * 1e3:.2f} ms" for name, ms in medians.items()), flush=True)
    plain = statistics.median(total["plain"])
    print(f"{options.workload} on {options.device}, {options.rounds} rounds of {options.calls} calls after "
          f"{options.warmup} warm-up: median ms per call, host ms until it returns, fastest call")
    for name in sessions:
        t, h = statistics.median(total[name]), statistics.median(host[name])
        print(f"  {name:12s} {t * 1e3:8.2f} ms ({t / plain:.2f}x)  host {h * 1e3:7.2f} ms  fastest "
              f"{min(total[name]) * 1e3:7.2f} ms")
    faster = sum(r["this tree"] < r[options.old] for r in rounds)
    ratio = statistics.median(r["this tree"] / r[options.old] for r in rounds)
    print(f"this tree faster in {faster} of {options.rounds} rounds; median of the rounds' ratios "
          f"(this tree / {options.old}): {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
