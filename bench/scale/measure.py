"""One end-to-end diff of a pair, as `python bench/run.py --only diff --diff-records N` makes it, on a pair
already on disk (bench/synth.py's, of any size), printed as JSON:

    /usr/bin/time -v python bench/scale/measure.py PAIR_DIR [CODE_ROOT]

CODE_ROOT (default: this checkout) is the tracediff that diffs, so two checkouts can be compared.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

pair = Path(sys.argv[1])
root = sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).resolve().parents[2])
sys.path[:0] = [root, str(Path(root) / "bench")]

import run as bench_run  # noqa: E402  (bench/run.py)

facts = bench_run.child_diff_e2e(str(pair / "a.jsonl"), str(pair / "b.jsonl"))
first = facts["first"]
print(json.dumps({k: facts[k] for k in ("wall_s", "cpu_s", "rss_peak_mib", "children_ru_maxrss_mib", "paired",
                                         "skeleton_a", "skeleton_b")}
                 | {"first": first and {k: first[k] for k in ("index_a", "op", "source", "kind")}}))
