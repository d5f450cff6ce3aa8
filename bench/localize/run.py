"""Localization benchmark (`make bench-localize`): does tracediff name the op a planted fault is in?

    python bench/localize/run.py                          # every model and backend, CPU, 30 faults each
    python bench/localize/run.py --models gpt2,llama --backends inductor --samples 10 --jobs 4
    python bench/localize/run.py --device cuda            # on an NVIDIA GPU

For each model (bench/localize/models.py) and backend, the compiled graph's
eligible nodes are listed (bench/localize/faults.py), a seeded sample of them
is drawn (every node when there are fewer), and for each one the script is
recorded with that node's output scaled by 1.01 and diffed against one eager
recording, exactly as `tracediff run` does (run/pipeline.run_against,
narrowing included). A fault counts when it is observable: the program's
results differ beyond the tolerance as tracediff defines it (the sum, l1, l2,
max and L2 distance of each result against rtol times its scale), computed
exactly on the saved results, not from tracediff's fingerprints; and the
fault's own effect (its results against those of the clean compiled run)
must exceed both the tolerance and what the backend alone changes
(bench/localize/observe.py says why). Faults that
move a few elements by more than rtol * max|x| while the whole stays within
the tolerance are counted apart ("elements only"): no fingerprint can see them;
so are faults whose effect is no larger than what the backend alone changes
("in noise": a compiled training step's AdamW amplifies rounding beyond the
tolerance with no fault at all), and faults of a training step whose loss and
gradients (what the compiled code returns) agree within the tolerance while the
weights the eager optimizer updated from them do not ("amplified": AdamW made a
difference below the tolerance visible, which tracediff reports as such).

Backends: `aot_eager` (fault planted in AOT autograd's graphs by a custom backend),
`inductor` (planted through inductor's config; the backend is plain inductor),
`compile_fx` (a custom backend calling inductor's compile_fx with the pass).

Per model and backend it prints: observable faults, exact (the reported source line
is the planted node's), among the candidates, wrong, false match (verdict `match`
on an observable fault), failed runs, and whether the clean run (no fault) matches.
Results: bench/out/localize-<device>.md (the table) and .jsonl (one line per
fault, written as each finishes; `--summarize FILE` tables a run cut short);
each run's traces and report under bench/out/localize-<device>/ (or --work).
`--rejudge FILE` judges those saved traces again with the code checked out now,
without recording (bench/localize/rejudge.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TARGET = HERE / "target.py"
BACKENDS = {"aot_eager": "faults:aot_eager_planted", "inductor": "inductor", "compile_fx": "faults:compile_fx_planted"}
SCALE = 1.01


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEDIFF_PLANT")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               TORCHINDUCTOR_COMPILE_THREADS="1", OMP_NUM_THREADS="1", **extra)  # jobs run side by side
    if "TRACEDIFF_PLANT" in extra or "TRACEDIFF_PLANT_LIST" in extra:
        # The pass must run: a graph from inductor's caches (an earlier benchmark's, same fault) skips it,
        # and with it the listing and the record that the fault was planted.
        env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    return env


def list_nodes(model: str, backend: str, device: str, work: Path) -> list[dict[str, Any]]:
    work.mkdir(parents=True, exist_ok=True)
    listing = work / "nodes.jsonl"
    listing.unlink(missing_ok=True)
    subprocess.run([sys.executable, str(TARGET), model, "--device", device, "--backend", backend], cwd=HERE,
                   env=_env(TRACEDIFF_PLANT_LIST=str(listing)), check=True, capture_output=True, text=True)
    return [json.loads(line) for line in listing.read_text().splitlines()]


def record_reference(model: str, device: str, work: Path) -> Path:
    """One eager recording of the script, shared by every fault of this model (recorded as `run` records A)."""
    from tracediff.config import load_config
    from tracediff.launch.launcher import record_in_subprocess
    from tracediff.launch.recording import Recording

    config = load_config(None)
    trace = work / "a-eager.jsonl"
    result_dir = work / "reference"
    result_dir.mkdir(exist_ok=True)
    run = record_in_subprocess(TARGET, [model, "--device", device], Recording.of(config, "eager"), trace,
                               echo=lambda _line: None, env=_env(TRACEDIFF_PLANT_OUT=str(result_dir)))
    if run.failure():
        raise SystemExit(f"eager recording of {model} failed: {run.failure()}")
    return trace


def plan(model: str, backends: list[str], args: argparse.Namespace, out: Path) -> list[list[dict[str, Any]]]:
    """Record the model's reference, list each backend's eligible nodes, draw the faults: one job list per backend."""
    work = out / model
    work.mkdir(exist_ok=True)
    log(f"[{model}] recording the eager reference, listing eligible nodes")
    reference = record_reference(model, args.device, work)
    groups = []
    for backend in backends:
        nodes = [n for n in list_nodes(model, backend, args.device, work / backend)
                 if not args.only or re.search(args.only, f"{n['op']} {n['source']} g{n['graph']}n{n['node']}")]
        picked = nodes if len(nodes) <= args.samples else random.Random(f"{args.seed}{model}{backend}").sample(nodes, args.samples)
        log(f"[{model}/{backend}] {len(nodes)} eligible nodes, {len(picked)} faults")
        common = dict(model=model, backend=backend, device=args.device, reference=str(reference),
                      reference_results=str(work / "reference" / "a.pt"))
        jobs = [dict(common, dir=str(work / backend / "clean"), plant=None, truth=None)]
        for node in picked:
            jobs.append(dict(common, dir=str(work / backend / f"g{node['graph']}n{node['node']}"),
                             plant=f"{node['graph']}:{node['node']}:{SCALE}", truth=node["source"],
                             node=node["name"], op=node["op"], backward=node["backward"]))
        groups.append(jobs)
    return groups


def interleaved(groups: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Round-robin over models and backends, so a run cut short has covered every one alike."""
    jobs: list[dict[str, Any]] = []
    for i in range(max((len(g) for g in groups), default=0)):
        jobs.extend(g[i] for g in groups if i < len(g))
    return jobs


class CleanRuns:
    """Lets a fault wait for the clean run of its model and backend, run in parallel, whose results its
    scoring needs. The clean runs come first in the job list, so they start before any fault waits."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self._done = {job["dir"]: threading.Event() for job in jobs if job.get("plant") is None}

    def finished(self, job: dict[str, Any]) -> None:
        if job.get("plant") is None:
            self._done[job["dir"]].set()

    def wait_for(self, job: dict[str, Any]) -> None:
        event = self._done.get(str(Path(job["dir"]).parent / "clean"))
        if event is not None:
            event.wait()


def run_and_score(job: dict[str, Any], clean_runs: CleanRuns) -> dict[str, Any]:
    """Run one fault (or clean run) and score it, its observability judged once the clean run is done."""
    try:
        result = run_fault(job)
    finally:
        clean_runs.finished(job)
    if result.get("plant") is not None and result["outcome"] != "failed":
        from observe import clean_results, float32_tolerance, observability

        from tracediff.config import load_config

        clean_runs.wait_for(job)
        tolerance = float32_tolerance(load_config(None), job["device"])
        result.update(observability(Path(job["reference_results"]), Path(job["dir"]) / "b.pt",
                                    clean_results(Path(job["dir"])), tolerance, job["model"]))
    if result["outcome"] != "failed":
        result["outcome"] = score(result)
    return result


def run_fault(job: dict[str, Any]) -> dict[str, Any]:
    """Run one fault in a fresh process (its own environment); return its result, not yet scored."""
    work = Path(job["dir"])
    work.mkdir(parents=True, exist_ok=True)
    env = _env(TRACEDIFF_PLANT_OUT=str(work), **({"TRACEDIFF_PLANT": job["plant"]} if job.get("plant") else {}))
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(HERE / "run.py"), "--worker", json.dumps(job)], cwd=HERE, env=env,
                          capture_output=True, text=True)
    elapsed = time.monotonic() - started
    result_file = work / "result.json"
    if done.returncode != 0 or not result_file.exists():
        return dict(job, outcome="failed", detail=done.stderr[-2000:], seconds=elapsed)
    return dict(json.loads(result_file.read_text()), seconds=elapsed)


def worker(job: dict[str, Any]) -> None:
    """In the worker process: record the faulty backend and diff it against the reference, as `run` does."""
    from tracediff.config import load_config
    from tracediff.outcome import RunResult
    from tracediff.outputs import RunDir
    from tracediff.run.pipeline import run_against

    work = Path(job["dir"])
    config = load_config(None)
    reference = RunResult(backend="eager", trace=Path(job["reference"]), log=Path(job["reference"]).with_suffix(".log"),
                          returncode=0, timed_out=False, elapsed_s=0.0)
    report = run_against(reference, TARGET, [job["model"], "--device", job["device"]], BACKENDS[job["backend"]],
                         config, RunDir(work), echo=lambda _line: None).to_json()
    first = report.get("first_divergence") or {}
    result = dict(job, verdict=report["verdict"], reported={k: first.get(k) for k in ("op", "source", "module")},
                  candidates=[c.get("source") for c in first.get("candidates") or []],
                  narrowing=(first.get("narrowing") or {}).get("result"), notes=report.get("notes", []),
                  pinned_by=first.get("pinned_by"),
                  nan_origin=[side for side, place in (report.get("nan_origin") or {}).items() if place],
                  outcome="judged")  # scored by the parent (run_and_score)
    (work / "result.json").write_text(json.dumps(result, indent=1))


def score(result: dict[str, Any]) -> str:
    if result.get("verdict") in (None, "failed"):  # the run never got to a verdict (`detail` says why)
        return "failed"
    if result.get("plant") is None:
        return "clean_match" if result["verdict"] == "match" else "false_alarm"
    if not result["observable"]:
        return "unobservable"
    if result["verdict"] == "match":
        return "false_match"
    truth = result["truth"]
    if result["reported"]["source"] == truth:
        return "exact"
    if truth in result["candidates"]:
        return "among"
    return "wrong"


COLUMNS = ("exact", "among", "wrong", "false_match", "failed", "unobservable")


def elements_only(result: dict[str, Any]) -> bool:
    """Unobservable, though some element moved by more than rtol * max |x| (observe.output_difference)."""
    return result["outcome"] == "unobservable" and (result.get("difference") or {}).get("elements", 0) > 1


def summarize(results: list[dict[str, Any]]) -> str:
    rows = ["| model | backend | observable | exact | among candidates | wrong | false match | failed | unobservable "
            "(elements only, in noise, amplified) | clean run |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    totals = {c: 0 for c in (*COLUMNS, "elements_only", "in_noise", "amplified")}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["model"], r["backend"]), []).append(r)
    for (model, backend), rs in groups.items():
        counts = {c: sum(r["outcome"] == c for r in rs) for c in COLUMNS}
        counts["elements_only"] = sum(elements_only(r) for r in rs)
        counts["in_noise"] = sum(r["outcome"] == "unobservable" and bool(r.get("in_noise")) for r in rs)
        counts["amplified"] = sum(r["outcome"] == "unobservable" and bool(r.get("amplified")) for r in rs)
        for c in totals:
            totals[c] += counts[c]
        clean = [r["outcome"] for r in rs if r.get("plant") is None]
        nan = any(r.get("nan_origin") for r in rs if r.get("plant") is None)
        observed = counts["exact"] + counts["among"] + counts["wrong"] + counts["false_match"]
        rows.append(f"| {model} | {backend} | {observed} | {counts['exact']} | {counts['among']} | {counts['wrong']} | "
                    f"{counts['false_match']} | {counts['failed']} | {counts['unobservable']} "
                    f"({counts['elements_only']}, {counts['in_noise']}, {counts['amplified']}) | "
                    f"{'match' if clean == ['clean_match'] else ('FALSE ALARM' if clean else '-')}"
                    f"{' (NaN/Inf origin reported)' if nan else ''} |")
    observed = totals["exact"] + totals["among"] + totals["wrong"] + totals["false_match"]
    if observed:
        rows.append(f"| **all** | | {observed} | {totals['exact']} ({100 * totals['exact'] / observed:.0f}%) | "
                    f"{totals['among']} | {totals['wrong']} | {totals['false_match']} | {totals['failed']} | "
                    f"{totals['unobservable']} ({totals['elements_only']}, {totals['in_noise']}, "
                    f"{totals['amplified']}) | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--models", default="mlp,cnn,train_mlp,gpt2,llama,bert,train_gpt2,train_gpt2_foreach")
    parser.add_argument("--backends", default="aot_eager,inductor,compile_fx")
    parser.add_argument("--samples", type=int, default=30, help="faults per model and backend (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"), help="where the tables go")
    parser.add_argument("--work", help="where each run's traces go [default: OUT/localize-DEVICE]")
    parser.add_argument("--only", metavar="REGEX", help="only nodes whose 'op file:line gGnN' matches, e.g. "
                        "'modeling_llama.py:1[0-9][0-9]', or one fault of an earlier run: ' g3n113$'")
    parser.add_argument("--summarize", metavar="JSONL", help="print the table of a (possibly cut short) run's results")
    parser.add_argument("--rejudge", metavar="JSONL", help="judge a run's saved traces again with this checkout's code "
                        "(no recording), print the table, write JSONL's results next to it as *-rejudged.jsonl")
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.summarize:
        print(summarize([json.loads(line) for line in Path(args.summarize).read_text().splitlines()]))
        return
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT))
    if args.rejudge:
        _rejudge(Path(args.rejudge))
        return
    import models

    names = [m for m in args.models.split(",") if m]
    if any(m in models.LIBRARY for m in names):
        try:
            import transformers  # noqa: F401
        except ImportError:
            log("transformers is not installed: library models skipped (pip install transformers)")
            names = [m for m in names if m not in models.LIBRARY]
    device = args.device.split(":")[0]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    work = Path(args.work or Path(args.out) / f"localize-{device}")
    work.mkdir(parents=True, exist_ok=True)
    progress = Path(args.out) / f"localize-{device}.jsonl"  # one line per finished fault: a cut-short run keeps them
    progress.unlink(missing_ok=True)
    started = time.monotonic()
    backends = args.backends.split(",")
    with ThreadPoolExecutor(args.jobs) as pool:
        groups = [g for model_groups in pool.map(lambda m: plan(m, backends, args, work), names) for g in model_groups]
        jobs = interleaved(groups)
        results: list[dict[str, Any]] = []
        clean_runs = CleanRuns(jobs)
        for done in pool.map(lambda job: run_and_score(job, clean_runs), jobs):
            results.append(done)
            with open(progress, "a", encoding="utf-8") as f:
                f.write(json.dumps(done) + "\n")
            rep = done.get("reported") or {}
            log(f"[{len(results)}/{len(jobs)}] {done['model']}/{done['backend']} {done.get('node') or 'clean'} "
                f"({done.get('op') or ''} {done.get('truth') or ''}): {done['outcome']}"
                + (f" -> {rep.get('op')} {rep.get('source')}" if done["outcome"] in ("wrong", "among") else ""))
    header = (f"Localization benchmark: {platform.node()} ({os.cpu_count()} cores), device {args.device}, "
              f"torch {_torch_version()}, {time.monotonic() - started:.0f} s\n\n`python bench/localize/run.py "
              f"--device {args.device} --models {','.join(names)} --backends {args.backends} --samples {args.samples} "
              f"--seed {args.seed}`\n")
    text = header + "\n" + summarize(results) + "\n"
    (Path(args.out) / f"localize-{device}.md").write_text(text)
    print(text)


def _rejudge(path: Path) -> None:
    from rejudge import rejudge_file

    from tracediff.config import load_config

    started = time.monotonic()
    results = rejudge_file(path, load_config(None), score, log)
    path.with_name(f"{path.stem}-rejudged.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    print(f"Re-judged {path} with this checkout's code ({time.monotonic() - started:.0f} s)\n")
    print(summarize(results))


def _torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    main()
