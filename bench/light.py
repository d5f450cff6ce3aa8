"""What `tracediff run --light` costs on a long training run, side by side with the compiled run alone.

    python bench/light.py                                  # CPU workloads, 3 rounds
    python bench/light.py --workloads gpt2_bf16 --steps 1000 --rounds 2   # e.g. on a GPU

For each workload, one process per configuration, rounds interleaved (plain, light, full, plain, ...) so that
machine noise hits all alike; the wall time of the whole process (Python start, imports and compiles
included), median over rounds:

  plain  the script as `python script.py` runs it (it compiles with inductor itself)
  light  the compiled run as `tracediff run --light` records it: compiled calls only, judged within a time budget
  full   the compiled run as `tracediff run` records it: every op, every call judged

The light mode's target (issue 47) is at most 2x plain. The calls judged, of those made, come from the light
trace's footer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
sys.path.insert(0, str(ROOT))

from tracediff.launch.recording import Recording  # noqa: E402

# name -> (script, default steps, needs transformers)
WORKLOADS: dict[str, tuple[Path, int, bool]] = {
    "tiny_gpt": (FIXTURES / "clean" / "tiny_gpt_train.py", 300, False),
    "gpt2_bf16": (FIXTURES / "gpt2_bf16_train.py", 200, True),
}
CONFIGS = ("plain", "light", "full")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _command(config: str, script: Path, args: list[str], trace: Path) -> list[str]:
    if config == "plain":
        return [sys.executable, str(script), *args]
    recording = Recording("inductor", judge=True, light=config == "light")
    return [sys.executable, "-m", "tracediff.child", "--out", str(trace), "--recording", recording.to_json(),
            str(script), "--", *args]


def _judging(trace: Path) -> dict[str, Any] | None:
    try:
        last = trace.read_text().rstrip().splitlines()[-1]
    except (OSError, IndexError):
        return None
    footer = json.loads(last)
    return footer.get("judging") if footer.get("t") == "footer" else None


def bench_workload(name: str, steps: int, rounds: int, configs: tuple[str, ...], tmp: Path) -> dict[str, Any]:
    script, _, _ = WORKLOADS[name]
    args = ["--steps", str(steps)]
    times: dict[str, list[float]] = {c: [] for c in configs}
    judging: dict[str, Any] | None = None
    for round_ in range(rounds):
        for config in configs:
            trace = tmp / f"{name}-{config}-{round_}.jsonl"
            started = time.perf_counter()
            done = subprocess.run(_command(config, script, args, trace), cwd=script.parent, capture_output=True,
                                  text=True, timeout=3600)
            elapsed = time.perf_counter() - started
            if done.returncode != 0:
                raise RuntimeError(f"{name} {config} failed ({done.returncode}):\n{done.stderr[-2000:]}")
            times[config].append(elapsed)
            if config == "light":
                judging = _judging(trace)
            log(f"[light] {name} {config} round {round_ + 1}: {elapsed:.1f} s")
    medians = {c: statistics.median(t) for c, t in times.items()}
    return {"workload": name, "steps": steps, "times": times, "median_s": medians, "judging": judging}


def run_all(names: list[str], steps: int | None, rounds: int, configs: tuple[str, ...]) -> dict[str, Any]:
    results = []
    with tempfile.TemporaryDirectory(prefix="tracediff-light-") as tmp:
        for name in names:
            if WORKLOADS[name][2] and not _has_transformers():
                log(f"[light] {name}: transformers is not installed: skipped")
                continue
            results.append(bench_workload(name, steps or WORKLOADS[name][1], rounds, configs, Path(tmp)))
    return {"rounds": rounds, "configs": list(configs), "workloads": results}


def _has_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def table(res: dict[str, Any]) -> str:
    configs = res["configs"]
    head = "| workload | steps | " + " | ".join(f"{c} (s)" for c in configs) + " | light / plain | full / plain | " \
           "calls judged (light) |"
    rows = [head, "|" + "---|" * (len(configs) + 5)]
    for w in res["workloads"]:
        m = w["median_s"]
        ratio = {c: f"{m[c] / m['plain']:.2f}x" if "plain" in m and c in m else "-" for c in ("light", "full")}
        judged = w.get("judging") or {}
        calls = f"{judged.get('judged')} of {judged.get('calls')}" if judged else "-"
        rows.append(f"| {w['workload']} | {w['steps']} | " + " | ".join(f"{m[c]:.1f}" for c in configs)
                    + f" | {ratio['light']} | {ratio['full']} | {calls} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--workloads", default="tiny_gpt,gpt2_bf16", help="comma-separated: " + ", ".join(WORKLOADS))
    ap.add_argument("--steps", type=int, default=None, help="training steps [default: per workload]")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    args = ap.parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    res = run_all(names, args.steps, args.rounds, tuple(c for c in args.configs.split(",") if c))
    print(table(res))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
