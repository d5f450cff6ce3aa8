"""Wall time and peak memory of a command and every process it starts (a diff of long traces runs B's side of the
walk in a second process, pass 1 in two): the peak of the summed RSS and of the summed PSS (shared pages counted
once), sampled four times a second from /proc (Linux). The command's stdout goes to /tmp/memwatch.out.

    python bench/scale/memwatch.py /usr/bin/time -v tracediff diff A.jsonl B.jsonl --format json
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

_INTERVAL = 0.25


def tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return pids
    for child in children:
        pids += tree(int(child))
    return pids


def rss_and_pss_kib(pid: int) -> tuple[int, int]:
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass  # the process ended meanwhile
    return rss, pss


def main() -> int:
    started = time.perf_counter()
    with open("/tmp/memwatch.out", "wb") as out:
        command = subprocess.Popen(sys.argv[1:], stdout=out)
        peak_rss = peak_pss = most = 0
        while command.poll() is None:
            pids = tree(command.pid)
            sizes = [rss_and_pss_kib(pid) for pid in pids]
            peak_rss = max(peak_rss, sum(rss for rss, _ in sizes))
            peak_pss = max(peak_pss, sum(pss for _, pss in sizes))
            most = max(most, len(pids))
            time.sleep(_INTERVAL)
    print(f"wall {time.perf_counter() - started:.1f} s, peak summed RSS {peak_rss / 1024:.0f} MiB, "
          f"PSS {peak_pss / 1024:.0f} MiB, processes {most}, exit {command.returncode}")
    return command.returncode


if __name__ == "__main__":
    sys.exit(main())
