"""tracediff benchmarks (`make bench`): recording overhead, diff at scale, aligner.

    python bench/run.py                 # everything (6-9 minutes on 2 CPU cores; +40 s the first time)
    python bench/run.py --quick         # smoke run: few repetitions, a 50k-record diff, no aligner table
    python bench/run.py --only overhead # one section: overhead | diff | sequence
    python bench/run.py --only diff --gc-check   # + the verdict pass timed with the cyclic GC off

Progress goes to stderr, the markdown tables to stdout. The tables and the
machine's facts are also written to bench/out/results.md, the raw numbers to
bench/out/results.json (a --quick or --only run writes results-quick.*,
results-<section>.* instead, so it never overwrites the full run's figures).

Sections:
  overhead  per workload (bench/workloads.py), in one process and on the same
            inputs: plain, tracediff.record(path), torch DebugMode with
            log_tensor_hashes(hash_inputs=True). Each config is warmed up, then
            repetitions are interleaved (plain, tracediff, DebugMode, plain, ...)
            and medians taken, so machine noise hits all three alike. Each of
            those calls opens its own session; a second table times calls in
            one session per config (as `tracediff run` records a script), the
            configs taking turns block by block. Peak memory comes from a
            fresh subprocess per (workload, config).
  diff      two synthetic 1,000,000-record traces (bench/synth.py; cached under
            bench/out/) diffed in fresh subprocesses: end to end (and the same
            pair as .jsonl.zst, bench/compressed_traces.py), and phase by phase
            (skeletons, align, verdict) with a JSON-parsing breakdown.
  sequence  bench/bench_sequence.py (align_sequences alone on 1M keys); full run only.
  cuda      bench/gpu.py: plain / tracediff / DebugMode on the GPU sizes, eager and
            inductor, one process per config; skipped without CUDA.
  light     bench/light.py: a long training run compiled, plain against `tracediff run --light`'s
            recording of it (compiled calls judged within a time budget), whole processes, rounds
            interleaved; on CUDA when there is one.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import gzip
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import compressed_traces  # noqa: E402  (bench/compressed_traces.py, beside this file)

SECTIONS = ("overhead", "diff", "sequence", "cuda", "light")
CONFIGS = ("plain", "tracediff", "debugmode")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- machine -------------------------------------------------------------------------------


def machine_facts() -> dict[str, Any]:
    import torch

    import tracediff

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {
        "source_digest": source_digest(),
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": cpu,
        "ram_gib": ram_gib,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "tracediff": tracediff.__version__,
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "loadavg": list(os.getloadavg()),
    }


def source_digest() -> str:
    """sha256 of tracediff/**/*.py: which code state the figures belong to (others edit it meanwhile)."""
    import hashlib

    digest = hashlib.sha256()
    for source in sorted((ROOT / "tracediff").rglob("*.py")):
        digest.update(str(source.relative_to(ROOT)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:12]


def maxrss_mib() -> float:
    """`ru_maxrss` in MiB (Linux reports KiB). Beware: Linux carries it over from the
    parent across fork/exec, so in a child it is at least the parent's RSS at spawn time."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _proc_status_mib(key: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_rss_mib() -> float:
    """Peak RSS of this process image: VmHWM (the high-water mark behind ru_maxrss, but not
    inherited from the parent, and resettable); ru_maxrss where /proc is missing."""
    hwm = _proc_status_mib("VmHWM")
    return hwm if hwm is not None else maxrss_mib()


def rss_mib() -> float | None:
    return _proc_status_mib("VmRSS")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# -- section 1: recording overhead ------------------------------------------------------------


def _runner(config: str, fn: Callable[[], object], trace_path: Path) -> Callable[[], dict[str, Any]]:
    """A call of `fn` under `config`, in a session of its own; returns facts about that call (ops recorded)."""
    if config == "plain":
        def plain() -> dict[str, Any]:
            fn()
            return {}
        return plain

    def in_session() -> dict[str, Any]:
        with _session(config, trace_path) as entered:
            fn()
        if config == "debugmode":
            return {"ops": sum(1 for c in entered.operators if type(c).__name__ == "_OpCall"),
                    "entries": len(entered.operators)}
        return {}
    return in_session


def _empty() -> None:
    return None


def _trace_facts(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    lines = data.splitlines()
    footer = json.loads(lines[-1])
    ops = footer.get("ops") or 0
    gz = len(gzip.compress(data, compresslevel=9, mtime=0))  # the level TraceWriter uses for .jsonl.gz
    zst = compressed_traces.zst_copy(path).stat().st_size  # as TraceWriter writes a .jsonl.zst
    return {
        "ops": ops,
        "records": footer.get("records"),
        "bytes": len(data),
        "gzip_bytes": gz,
        "bytes_per_op": len(data) / ops if ops else None,
        "gzip_bytes_per_op": gz / ops if ops else None,
        "zstd_bytes": zst,
        "zstd_bytes_per_op": zst / ops if ops else None,
    }


def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _time_interleaved(runners: dict[str, Callable[[], dict[str, Any]]], reps: int
                      ) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Seconds and minor page faults of each call, configs interleaved: A B C A B C ..."""
    samples: dict[str, list[float]] = {c: [] for c in runners}
    faults: dict[str, list[int]] = {c: [] for c in runners}
    for _ in range(reps):
        for config, run in runners.items():
            gc.collect()  # garbage of the previous config is not this config's cost
            f0 = _minflt()
            t0 = time.perf_counter()
            run()
            samples[config].append(time.perf_counter() - t0)
            faults[config].append(_minflt() - f0)
    return samples, faults


@contextlib.contextmanager
def _session(config: str, trace_path: Path) -> Iterator[Any]:
    """The context calls run in under `config`: nothing, one recording (yields the session), or one DebugMode
    with tensor hashes (yields the DebugMode)."""
    if config == "tracediff":
        import tracediff

        with tracediff.record(trace_path) as session:
            yield session
    elif config == "debugmode":
        from torch.utils._debug_mode import DebugMode

        with DebugMode() as dm, DebugMode.log_tensor_hashes(hash_inputs=True):
            yield dm
    elif config == "plain":
        yield None
    else:
        raise ValueError(config)


def _time_in_sessions(fn: Callable[[], object], trace_path: Path, rounds: int, calls: int) -> dict[str, list[float]]:
    """Seconds per call, each config's calls in one session as `tracediff run` records a script (and as
    bench/gpu.py times the GPU): per round and config, one session around a warm-up call and `calls` timed
    ones (the warm-up reads the weights, which later calls find unchanged); rounds interleave the configs."""
    samples: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for _ in range(rounds):
        for config in CONFIGS:
            gc.collect()
            with _session(config, trace_path):
                fn()
                for _ in range(calls):
                    t0 = time.perf_counter()
                    fn()
                    samples[config].append(time.perf_counter() - t0)
    return samples


def overhead_timing(workload: str, quick: bool, tmp: Path) -> dict[str, Any]:
    """Timing of one workload (or the empty block) under all configs, in this process."""
    import torch
    import workloads

    fn = _empty if workload == "empty" else workloads.make(workload)
    trace_path = tmp / f"{workload}.jsonl"
    runners = {c: _runner(c, fn, trace_path) for c in CONFIGS}
    warmup = 1 if quick else 3
    t0 = time.perf_counter()
    facts: dict[str, dict[str, Any]] = {}
    for config, run in runners.items():
        for _ in range(warmup):
            facts[config] = run()
    warm_s = time.perf_counter() - t0
    # Repetitions: as many as fit the time budget, within bounds.
    per_rep = warm_s / warmup
    budget, lo, hi = (2.0, 3, 10) if quick else (12.0, 9, 41)
    reps = int(min(hi, max(lo, budget / max(per_rep, 1e-6))))
    load_before = os.getloadavg()[0]
    samples, faults = _time_interleaved(runners, reps)
    med = {c: statistics.median(s) for c, s in samples.items()}
    in_session = _time_in_sessions(fn, tmp / f"{workload}-session.jsonl", 2 if quick else 5, 2 if quick else 4) if workload != "empty" else {}
    session_med = {c: statistics.median(s) * 1e3 for c, s in in_session.items()}
    result: dict[str, Any] = {
        "workload": workload,
        "reps": reps,
        "warmup": warmup,
        "median_ms": {c: med[c] * 1e3 for c in CONFIGS},
        "min_ms": {c: min(s) * 1e3 for c, s in samples.items()},
        "samples_ms": {c: [round(x * 1e3, 4) for x in s] for c, s in samples.items()},
        "minor_faults_median": {c: statistics.median(f) for c, f in faults.items()},
        "minor_faults": faults,
        "loadavg_1min": [load_before, os.getloadavg()[0]],
        "ratio_tracediff_plain": med["tracediff"] / med["plain"] if workload != "empty" else None,
        "ratio_debugmode_plain": med["debugmode"] / med["plain"] if workload != "empty" else None,
        "ratio_tracediff_debugmode": med["tracediff"] / med["debugmode"],
        "debugmode_ops": facts["debugmode"].get("ops"),
        "trace": _trace_facts(trace_path),
        "torch_threads": torch.get_num_threads(),
        "in_session_median_ms": session_med,
        "in_session_samples_ms": {c: [round(x * 1e3, 4) for x in v] for c, v in in_session.items()},
    }
    ops = result["trace"]["ops"]
    if ops and workload != "empty":
        result["tracediff_us_per_op"] = (med["tracediff"] - med["plain"]) * 1e6 / ops
    if result["debugmode_ops"] and workload != "empty":
        result["debugmode_us_per_op"] = (med["debugmode"] - med["plain"]) * 1e6 / result["debugmode_ops"]
    return result


def child_memory(workload: str, config: str, calls: int) -> dict[str, Any]:
    """In a fresh process: peak RSS of `calls` calls under `config`, and traced Python allocations.

    Every config's process does the same before its calls (imports, model and
    inputs, an empty block under each mode so lazy imports are done), so peak
    RSS minus the plain process's peak is what the mode itself adds.
    """
    import torch
    import torch._inductor.config  # noqa: F401  (imported by every recording session)
    import workloads
    from torch.utils._debug_mode import DebugMode

    import tracediff
    import tracediff.record.session  # noqa: F401

    tmp = Path(tempfile.mkdtemp(prefix="tracediff-bench-mem-"))
    with tracediff.record(tmp / "warm.jsonl"):
        pass
    with DebugMode(), DebugMode.log_tensor_hashes(hash_inputs=True):
        torch.ones(2) + 1
    fn = workloads.make(workload)
    fn()  # one plain call first: allocator warm, optimizer state created (train_step)
    run = _runner(config, fn, tmp / "mem.jsonl")
    gc.collect()
    reset = reset_peak_rss()
    base = rss_mib()
    run()
    first = peak_rss_mib()
    for _ in range(calls - 1):
        run()
        gc.collect()
    peak = peak_rss_mib()
    gc.collect()
    tracemalloc.start()
    run()
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"workload": workload, "config": config, "calls": calls, "peak_reset": reset, "rss_before_calls_mib": base,
            "ru_maxrss_mib": maxrss_mib(),
            "rss_peak_first_call_mib": first, "rss_peak_mib": peak,
            "rss_growth_per_extra_call_mib": (peak - first) / (calls - 1) if calls > 1 else None,
            "tracemalloc_peak_mib": traced_peak / 2**20}


def _run_child(args: list[str], timeout: float = 900) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"child {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = wall
    return result


# A workload's timing is retried when its plain median exceeds its best plain call by this factor.
_NOISY = 1.25
# No retries once the timing part of the section has run this long (keeps `make bench` near 10 minutes).
_RETRY_BUDGET_S = 200.0


def section_overhead(quick: bool, names: list[str] | None = None) -> dict[str, Any]:
    import workloads

    names = list(names or workloads.NAMES)
    for name in [n for n in names if not workloads.available(n)]:
        log(f"[overhead] {name}: skipped (needs transformers: pip install -e '.[bench]')")
        names.remove(name)
    tmp = Path(tempfile.mkdtemp(prefix="tracediff-bench-"))
    rows = []
    attempts = 1 if quick else 3
    started = time.perf_counter()
    for name in ("empty", *names):
        tries: list[dict[str, Any]] = []
        for attempt in range(attempts):
            log(f"[overhead] timing {name} ..." + (f" (attempt {attempt + 1}: the last one was noisy)" if attempt else ""))
            t0 = time.perf_counter()
            row = overhead_timing(name, quick, tmp)
            m = row["median_ms"]
            row["noise"] = m["plain"] / row["min_ms"]["plain"] if row["min_ms"]["plain"] > 0 else 1.0
            log(f"[overhead]   {name}: plain {m['plain']:.2f} ms, tracediff {m['tracediff']:.2f} ms, "
                f"DebugMode {m['debugmode']:.2f} ms ({row['reps']} reps, noise {row['noise']:.2f}, "
                f"{time.perf_counter() - t0:.0f} s)")
            tries.append(row)
            # Another process or the host took the CPU for part of the run: the plain median is
            # well off its best call. Measure again (all configs) and keep the quietest attempt.
            if name == "empty" or row["noise"] <= _NOISY or time.perf_counter() - started > _RETRY_BUDGET_S:
                break
        best = min(tries, key=lambda r: r["noise"])
        best["attempts"] = len(tries)
        best["noise_of_attempts"] = [r["noise"] for r in tries]
        rows.append(best)
    calls = 2 if quick else 4
    memory: dict[str, dict[str, Any]] = {}
    for name in names:
        for config in CONFIGS:
            log(f"[overhead] memory {name} / {config} (fresh subprocess) ...")
            memory[f"{name}/{config}"] = _run_child(["--child-memory", name, config, str(calls)])
    return {"rows": rows, "memory": memory, "memory_calls": calls,
            "descriptions": dict(workloads.DESCRIPTIONS),
            "parameters": {n: workloads.parameter_count(n) for n in workloads.NAMES}}


def table_overhead(res: dict[str, Any]) -> str:
    def ratio(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}x"

    out = []
    out.append("| workload | plain ms | tracediff ms | DebugMode ms | tracediff / plain | DebugMode / plain "
               "| tracediff / DebugMode | reps | noise: plain median / best |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in res["rows"]:
        m = r["median_ms"]
        name = "(empty block)" if r["workload"] == "empty" else r["workload"]
        noise = m["plain"] / r["min_ms"]["plain"] if r["min_ms"]["plain"] > 0 else None
        tries = f" (quietest of {r['attempts']} attempts)" if r.get("attempts", 1) > 1 else ""
        out.append(f"| {name} | {m['plain']:.2f} | {m['tracediff']:.2f} | {m['debugmode']:.2f} | "
                   f"{ratio(r['ratio_tracediff_plain'])} | {ratio(r['ratio_debugmode_plain'])} | "
                   f"{r['ratio_tracediff_debugmode']:.2f}x | {r['reps']}{tries} | "
                   f"{'-' if noise is None or name == '(empty block)' else f'{noise:.2f}'} |")
    session_rows = [r for r in res["rows"] if r.get("in_session_median_ms")]
    if session_rows:
        out.append("")
        out.append("In one session, as `tracediff run` records a script and as bench/gpu.py times the GPU: per round "
                   "and config, one session (a recording, a DebugMode, or nothing) around a warm-up call and timed "
                   "calls, the configs taking turns round by round; medians over every timed call. The table above "
                   "opens a session per call instead, so it also counts the session's fixed cost and reading the "
                   "weights again on every call.")
        out.append("")
        out.append("| workload | plain ms | tracediff ms | DebugMode ms | tracediff / plain | DebugMode / plain | timed calls per config |")
        out.append("|---|---:|---:|---:|---:|---:|---:|")
        for r in session_rows:
            m = r["in_session_median_ms"]
            out.append(f"| {r['workload']} | {m['plain']:.2f} | {m['tracediff']:.2f} | {m['debugmode']:.2f} | "
                       f"{m['tracediff'] / m['plain']:.2f}x | {m['debugmode'] / m['plain']:.2f}x | "
                       f"{len(r['in_session_samples_ms']['plain'])} |")
    out.append("")
    out.append("Best of the same repetitions (the least disturbed call of each config), per-op cost and trace size. "
               "us/op: (config - plain) / ops, on medians. bytes/op: the recorded .jsonl, gzip -9 of it "
               "(what a `.jsonl.gz` trace costs) and the .jsonl.zst TraceWriter writes, over ops recorded.")
    out.append("")
    out.append("| workload | best ms: plain / tracediff / DebugMode | best: tracediff / plain | best: DebugMode / plain "
               "| ops: tracediff / DebugMode | us/op: tracediff / DebugMode | trace bytes/op: jsonl / gz / zst |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for r in res["rows"]:
        if r["workload"] == "empty":
            continue
        b = r["min_ms"]
        t = r["trace"]
        per_op = " / ".join("-" if r.get(k) is None else f"{r[k]:.0f}" for k in ("tracediff_us_per_op", "debugmode_us_per_op"))
        bpo = f"{t['bytes_per_op']:.0f} / {t['gzip_bytes_per_op']:.0f} / {t['zstd_bytes_per_op']:.0f}" if t["ops"] else "-"
        out.append(f"| {r['workload']} | {b['plain']:.2f} / {b['tracediff']:.2f} / {b['debugmode']:.2f} | "
                   f"{ratio(b['tracediff'] / b['plain'])} | {ratio(b['debugmode'] / b['plain'])} | "
                   f"{t['ops']} / {r['debugmode_ops']} | {per_op} | {bpo} |")
    empty = next((r for r in res["rows"] if r["workload"] == "empty"), None)
    if empty:
        out.append("")
        out.append(f"(empty block): the fixed cost of entering and leaving the mode around nothing: tracediff "
                   f"{empty['median_ms']['tracediff']:.2f} ms (header with numeric settings, file open, footer; "
                   f"{empty['trace']['bytes']} B file), DebugMode {empty['median_ms']['debugmode']:.2f} ms.")
    out.append("")
    out.append(f"Memory. Peak RSS (all allocations, tensors included) of a fresh subprocess per (workload, "
               f"config) that imports everything, builds the model, enters an empty block under each mode, makes "
               f"one plain call (so optimizer state exists), resets its RSS high-water mark, then calls the "
               f"workload under its config {res['memory_calls']} times "
               f"(`gc.collect()` after each). Peak RSS is `VmHWM` from /proc/self/status, the counter behind "
               f"`ru_maxrss`: `ru_maxrss` itself is carried over from the parent across fork/exec on Linux, so in "
               f"a child of this harness it only reports the harness's own size. 'first call': the plain "
               f"process's peak during one call, and what each mode adds to it. 'growth per further call': how "
               f"much the peak still rises with each later call (a steady "
               f"state is 0; more means memory kept across calls). `tracemalloc` peak of one more call: Python "
               f"allocations only (record dicts, JSON text, DebugMode's call log), not tensor storage. Minor page "
               f"faults: median per call in the timing loop above (fresh memory touched by the call).")
    out.append("")
    out.append("| workload | first call: plain MiB | + tracediff | + DebugMode | growth per further call MiB: plain / tracediff / DebugMode | tracemalloc peak MiB: plain / tracediff / DebugMode | minor faults per call: plain / tracediff / DebugMode |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    rows = {r["workload"]: r for r in res["rows"]}
    names = sorted({k.split("/")[0] for k in res["memory"]}, key=list(res["descriptions"]).index)
    for name in names:
        mem = [res["memory"][f"{name}/{c}"] for c in CONFIGS]
        plain, td, dm = (m["rss_peak_first_call_mib"] for m in mem)
        growth = " / ".join("-" if m["rss_growth_per_extra_call_mib"] is None else f"{m['rss_growth_per_extra_call_mib']:.1f}"
                            for m in mem)
        traced = " / ".join(f"{m['tracemalloc_peak_mib']:.2f}" for m in mem)
        faults = " / ".join(f"{rows[name]['minor_faults_median'][c]:.0f}" for c in CONFIGS) if name in rows else "-"
        out.append(f"| {name} | {plain:.0f} | {td - plain:+.1f} | {dm - plain:+.1f} | {growth} | {traced} | {faults} |")
    out.append("")
    out.append("Workloads (bench/workloads.py, autograd on, train mode):")
    out.append("")
    for name, desc in res["descriptions"].items():
        params = res["parameters"].get(name)
        out.append(f"- `{name}`: {desc}" + (f" ({params / 1e6:.2f} M parameters)" if params else ""))
    return "\n".join(out)


# -- section 2: diff at scale -------------------------------------------------------------------


def _divergence_facts(result: Any) -> dict[str, Any]:
    first = result.first
    facts: dict[str, Any] = {"paired": result.paired, "compared": result.compared, "unpaired_a": result.unpaired_a,
                             "unpaired_b": result.unpaired_b, "inherited": result.inherited,
                             "inherited_complete": getattr(result, "inherited_complete", True),
                             "structure_count": result.structure_count, "skeleton_a": len(result.a),
                             "skeleton_b": len(result.b), "first": None}
    if first is not None:
        facts["first"] = {"kind": first.kind, "index_a": first.a.index, "op": first.a.op, "source": first.a.source,
                          "module": first.a.module, "index_b": first.b.index if first.b else None,
                          "inputs_agree": first.inputs_agree, "note": first.note, "rel_diff": first.rel_diff,
                          "candidates": len(first.candidates)}
    return facts


def child_diff_e2e(a: str, b: str) -> dict[str, Any]:
    import tracediff.diff.engine as engine
    from tracediff.config import Config
    from tracediff.diff.engine import diff_traces

    gc.collect()
    reset_peak_rss()
    base = rss_mib()
    cpu0 = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    t0 = time.perf_counter()
    result = diff_traces(a, b, Config())
    wall = time.perf_counter() - t0
    cpu1 = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum((r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime) for r0, r1 in zip(cpu0, cpu1))
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"wall_s": wall, "cpu_s": cpu, "rss_base_mib": base, "rss_peak_mib": peak_rss_mib(),
            "ru_maxrss_mib": maxrss_mib(), "children_ru_maxrss_mib": children or None,
            "parallel_skeletons": hasattr(engine, "build_skeletons"), **_divergence_facts(result)}


def _as_tuple(aligned: Any) -> tuple:
    """`align` returns the partner array (older) or (partner, tier); find_divergence takes them in order."""
    return tuple(aligned) if isinstance(aligned, tuple) else (aligned,)


def child_diff_phases(a: str, b: str, breakdown: bool, gc_off: bool = False) -> dict[str, Any]:
    from tracediff.config import Config
    from tracediff.diff.align import align
    from tracediff.diff.skeleton import build_skeleton
    from tracediff.diff.verdict import find_divergence

    gc.collect()
    reset_peak_rss()
    base = rss_mib()
    times: dict[str, float] = {}
    peaks: dict[str, float] = {}
    after: dict[str, float | None] = {}

    def phase(name: str, call: Callable[[], Any]) -> Any:
        reset_peak_rss()
        t0 = time.perf_counter()
        value = call()
        times[name] = time.perf_counter() - t0
        peaks[name] = peak_rss_mib()
        after[name] = rss_mib()
        return value

    sa = phase("build_skeleton_a", lambda: build_skeleton(a))
    sb = phase("build_skeleton_b", lambda: build_skeleton(b))
    aligned = _as_tuple(phase("align", partial(align, sa, sb)))
    if gc_off:  # diagnostic: how much of the verdict pass is Python's cyclic GC
        gc.disable()
    result = phase("find_divergence", partial(find_divergence, sa, sb, *aligned, Config()))
    gc.enable()
    out: dict[str, Any] = {"gc_off": gc_off, "times_s": times, "rss_base_mib": base, "phase_peak_rss_mib": peaks,
                           "rss_after_mib": after, "rss_peak_mib": max(peaks.values()), **_divergence_facts(result)}
    del aligned, result, sa, sb
    gc.collect()
    if breakdown:
        out["breakdown_a"] = _parse_breakdown(a, _BREAKDOWN_RECORDS)
    return out


# Records per pass of the parse breakdown (a prefix: the ratios are what matters).
_BREAKDOWN_RECORDS = 200_000


def _parse_breakdown(path: str, limit: int) -> dict[str, Any]:
    """Microseconds per record for successive layers of a pass over the first `limit` records."""
    from itertools import islice

    from tracediff.diff.skeleton import alignable, keys_of
    from tracediff.trace.reader import Trace

    try:  # private: may move; the breakdown then goes without it
        from tracediff.diff.verdict import _first_nonfinite_origin
    except ImportError:
        _first_nonfinite_origin = None

    def timed(body: Callable[[], int]) -> float:
        t0 = time.perf_counter()
        n = body()
        return (time.perf_counter() - t0) * 1e6 / max(n, 1)

    def lines_only() -> int:
        with open(path, encoding="utf-8") as f:
            return sum(1 for _ in islice(f, 1, limit + 1))

    def loads_with(decode: Callable[[str], Any]) -> Callable[[], int]:
        def body() -> int:
            n = 0
            with open(path, encoding="utf-8") as f:
                for line in islice(f, 1, limit + 1):
                    decode(line)
                    n += 1
            return n
        return body

    try:  # the reader's own decoder (orjson with a json fallback, where it has one)
        from tracediff.trace.reader import parse_line
    except ImportError:
        parse_line = None

    def trace_iter() -> int:
        return sum(1 for _ in islice(Trace(path), limit))

    def with_keys() -> int:
        n = 0
        for record in islice(Trace(path), limit):
            if alignable(record):
                keys_of(record)
            n += 1
        return n

    def with_nan_scan() -> int:
        n = 0
        for record in islice(Trace(path), limit):
            _first_nonfinite_origin(record)
            n += 1
        return n

    us = {"read_lines": timed(lines_only), "json_loads": timed(loads_with(json.loads))}
    if parse_line is not None:
        us["reader_parse_line"] = timed(loads_with(parse_line))
    us["trace_iter"] = timed(trace_iter)
    us["trace_iter_alignable_keys_of"] = timed(with_keys)
    if _first_nonfinite_origin is not None:
        us["trace_iter_nan_origin_scan"] = timed(with_nan_scan)
    return {"records": sum(1 for _ in islice(Trace(path), limit)), "us_per_record": us}


def child_profile_verdict(a: str, b: str) -> dict[str, Any]:
    """cProfile of find_divergence (on a small pair: the profiler slows it several-fold)."""
    import cProfile
    import pstats

    from tracediff.config import Config
    from tracediff.diff.align import align
    from tracediff.diff.skeleton import build_skeleton
    from tracediff.diff.verdict import find_divergence

    sa, sb = build_skeleton(a), build_skeleton(b)
    aligned = _as_tuple(align(sa, sb))
    prof = cProfile.Profile()
    prof.enable()
    find_divergence(sa, sb, *aligned, Config())
    prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (filename, line, func), (_, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(filename).name}:{line}({func})" if line else func
        rows.append({"function": where, "calls": nc, "tottime_s": tt, "cumtime_s": ct})
    rows.sort(key=lambda r: -r["tottime_s"])
    return {"total_s": total, "top": rows[:12]}


def section_diff(quick: bool, gc_check: bool = False, records: int | None = None) -> dict[str, Any]:
    """`records`: a pair of that many records (400 edits per million) diffed end to end only, plain and .zst
    (the phase-by-phase pass aligns in one piece, which is for pairs within one window)."""
    import synth

    n, edits = (50_000, 40) if quick else (1_000_000, 400)
    if records is not None:
        n, edits = records, max(1, records * 400 // 1_000_000)
    t0 = time.perf_counter()
    folder, meta = synth.cached(OUT / "synth", n, edits=edits, progress=log)
    log(f"[diff] traces: {folder} ({'cached' if meta['cached'] else f'generated in {time.perf_counter() - t0:.0f} s'}; "
        f"A {meta['bytes_a'] / 2**20:.0f} MiB, B {meta['bytes_b'] / 2**20:.0f} MiB)")
    a, b = str(folder / "a.jsonl"), str(folder / "b.jsonl")
    log("[diff] diff_traces end to end (fresh subprocess) ...")
    e2e = _run_child(["--child-diff-e2e", a, b])
    log(f"[diff]   {e2e['wall_s']:.1f} s, peak RSS {e2e['rss_peak_mib']:.0f} MiB")
    log("[diff] the same pair as .jsonl.zst (written once beside it), diff_traces end to end (fresh subprocess) ...")
    a_zst, b_zst = (compressed_traces.zst_copy(Path(p)) for p in (a, b))
    e2e_zst = _run_child(["--child-diff-e2e", str(a_zst), str(b_zst)])
    e2e_zst["bytes"] = [a_zst.stat().st_size, b_zst.stat().st_size]
    log(f"[diff]   {e2e_zst['wall_s']:.1f} s, peak RSS {e2e_zst['rss_peak_mib']:.0f} MiB")
    if records is not None:
        first, planted = e2e["first"], meta["planted"]
        return {"meta": meta, "e2e": e2e, "e2e_zst": e2e_zst, "found_planted": bool(first) and first["index_a"] ==
                planted["index_a"] and first["index_b"] == planted["index_b"] and first["kind"] == "output"}
    log("[diff] phase by phase, then a parse breakdown (fresh subprocess) ...")
    phases = _run_child(["--child-diff-phases", a, b, "--breakdown"])
    log(f"[diff]   {', '.join(f'{k} {v:.1f} s' for k, v in phases['times_s'].items())}")
    gc_off = None
    if gc_check:
        log("[diff] phases again with the cyclic GC off during find_divergence (--gc-check) ...")
        gc_off = _run_child(["--child-diff-phases", a, b, "--gc-off"])
        log(f"[diff]   find_divergence {gc_off['times_s']['find_divergence']:.1f} s with gc off")
    # cProfile of the verdict pass on the small pair (the profiler would slow the 1M one several-fold).
    small, small_meta = synth.cached(OUT / "synth", 50_000, edits=40, progress=log)
    log("[diff] cProfile of find_divergence on the 50k-record pair (fresh subprocess) ...")
    profile = _run_child(["--child-profile-verdict", str(small / "a.jsonl"), str(small / "b.jsonl")])
    planted = meta["planted"]
    found = []
    for run in (e2e, e2e_zst, phases):
        first = run["first"]
        found.append(bool(first) and first["index_a"] == planted["index_a"] and first["index_b"] == planted["index_b"]
                     and first["kind"] == "output" and first["inputs_agree"])
    return {"meta": meta, "e2e": e2e, "e2e_zst": e2e_zst, "phases": phases, "phases_gc_off": gc_off, "profile": profile, "profile_records": small_meta["records_a"],
            "found_planted": all(found)}


def _table_diff_end_to_end(res: dict[str, Any]) -> str:
    meta = res["meta"]
    rows = [f"Synthetic pair ({meta['version']}, bench/synth.py): A {meta['records_a']:,} records "
            f"({meta['bytes_a'] / 2**20:,.0f} MiB), B {meta['records_b']:,}; {meta['edits']} edits; planted at "
            f"A #{meta['planted']['index_a']}; found: {res['found_planted']}", "",
            "| traces | wall s | CPU s | peak RSS MiB (the skeleton worker's) |", "|---|---:|---:|---:|"]
    for name, run in (("plain", res["e2e"]), (".jsonl.zst", res["e2e_zst"])):
        rows.append(f"| {name} | {run['wall_s']:.1f} | {run['cpu_s']:.1f} | {run['rss_peak_mib']:.0f} "
                    f"({run.get('children_ru_maxrss_mib') or 0:.0f}) |")
    return "\n".join(rows)


def _zst_rows(zst: dict[str, Any] | None, plain: dict[str, Any]) -> list[str]:
    """The same pair's diff as .jsonl.zst (bench/compressed_traces.py writes the copies), against the plain one."""
    if not zst:
        return []
    return [f"| the same pair as .jsonl.zst (zstd -1, {sum(zst['bytes']) / 2**20:.0f} MiB in all): end to end, wall "
            f"| {zst['wall_s']:.1f} s ({zst['wall_s'] / plain['wall_s']:.2f}x the plain pair's) |",
            f"| its CPU time, peak RSS | {zst['cpu_s']:.1f} s, {zst['rss_peak_mib']:.0f} MiB |"]


def table_diff(res: dict[str, Any]) -> str:
    if "phases" not in res:  # --diff-records: end to end only
        return _table_diff_end_to_end(res)
    meta, e2e, ph = res["meta"], res["e2e"], res["phases"]
    t = ph["times_s"]
    total = sum(t.values())
    p = meta["planted"]
    na, nb = meta["records_a"], meta["records_b"]
    out = [
        f"Synthetic pair ({meta['version']}, bench/synth.py, written with TraceWriter in the recorder's record "
        f"shape): A {na:,} op records ({meta['bytes_a'] / 2**20:.0f} MiB .jsonl), B {nb:,} "
        f"({meta['bytes_b'] / 2**20:.0f} MiB); {meta['distinct_keys']} distinct (op family, output shapes) keys "
        f"repeating as a {meta['layers']}-layer training step of {meta['step_length']:,} records; B has "
        f"{meta['insertions']} insertions and {meta['deletions']} deletions scattered, and one value divergence "
        f"planted at A #{p['index_a']} ({p['op']} at {p['source']}; B #{p['index_b']}), after which B's outputs "
        f"stay off (as a real divergence propagates). Files are in the page cache (just generated or re-read).",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| `diff_traces(a, b, Config())` end to end, wall | {e2e['wall_s']:.1f} s |",
        f"| CPU time (user + sys, worker processes included) | {e2e['cpu_s']:.1f} s |",
        f"| peak RSS during it (VmHWM, fresh subprocess) | {e2e['rss_peak_mib']:.0f} MiB "
        f"(RSS before the call: {e2e['rss_base_mib']:.0f} MiB) |",
        *([f"| peak RSS of its worker processes (`ru_maxrss` of children) | {e2e['children_ru_maxrss_mib']:.0f} MiB |"]
          if e2e.get("children_ru_maxrss_mib") else []),
        f"| throughput | {(na + nb) / e2e['wall_s'] / 1e3:.0f} k records/s, "
        f"{(meta['bytes_a'] + meta['bytes_b']) / 2**20 / e2e['wall_s']:.0f} MiB/s |",
        *_zst_rows(res.get("e2e_zst"), e2e),
        "",
        ("Phases (a second fresh subprocess making the calls `diff_traces` makes, timed one by one; the skeletons "
         "here one after the other, whereas `diff_traces` builds the two in parallel processes for large files "
         "(`engine.build_skeletons`), so end to end can be less than the sum):"
         if e2e.get("parallel_skeletons") else
         "Phases (a second fresh subprocess making the same calls as `diff_traces`, timed one by one):"),
        "",
        "| phase | seconds | share | peak RSS during the phase, MiB |",
        "|---|---:|---:|---:|",
    ]
    for k, v in t.items():
        out.append(f"| `{k}` | {v:.2f} | {100 * v / total:.0f}% | {ph['phase_peak_rss_mib'][k]:.0f} |")
    out.append(f"| total | {total:.2f} | 100% | {ph['rss_peak_mib']:.0f} |")
    bd = ph.get("breakdown_a")
    if bd:
        us = bd["us_per_record"]
        skel_us = t["build_skeleton_a"] * 1e6 / na
        out += ["", f"Per-record cost of the layers of one pass (first {bd['records']:,} records of A, each pass "
                    f"timed separately), against `build_skeleton(A)`'s {skel_us:.1f} us per record:", "",
                "| pass | us per record | share of build_skeleton |", "|---|---:|---:|",
                f"| read lines (file I/O + UTF-8 decode) | {us['read_lines']:.2f} | {100 * us['read_lines'] / skel_us:.0f}% |",
                f"| + stdlib `json.loads` | {us['json_loads']:.2f} | {100 * us['json_loads'] / skel_us:.0f}% |"]
        if "reader_parse_line" in us:
            out.append(f"| + the reader's `parse_line` (what `Trace` uses) | {us['reader_parse_line']:.2f} | "
                       f"{100 * us['reader_parse_line'] / skel_us:.0f}% |")
        out += [
                f"| `Trace` iteration (reader, validation) | {us['trace_iter']:.2f} | {100 * us['trace_iter'] / skel_us:.0f}% |",
                f"| + `alignable` + `keys_of` | {us['trace_iter_alignable_keys_of']:.2f} | "
                f"{100 * us['trace_iter_alignable_keys_of'] / skel_us:.0f}% |"]
        if "trace_iter_nan_origin_scan" in us:
            out.append(f"| `Trace` iteration + `_first_nonfinite_origin` (verdict's NaN-origin scan) | "
                       f"{us['trace_iter_nan_origin_scan']:.2f} | - |")
    if res.get("phases_gc_off"):
        off = res["phases_gc_off"]["times_s"]["find_divergence"]
        fd = t["find_divergence"]
        out += ["", f"With Python's cyclic GC disabled during `find_divergence` (`--gc-check`, a third subprocess): "
                    f"{off:.1f} s instead of {fd:.1f} s, so ~{fd - off:.0f} s ({100 * (fd - off) / fd:.0f}%) of the "
                    f"verdict pass is garbage-collector scans of the records it keeps alive."]
    prof = res.get("profile")
    if prof:
        out += ["", f"cProfile of `find_divergence` on the {res['profile_records']:,}-record pair "
                    f"({prof['total_s']:.1f} s under the profiler), top functions by own time:", "",
                "| function | calls | own s | cumulative s |", "|---|---:|---:|---:|"]
        for r in prof["top"][:10]:
            out.append(f"| `{r['function']}` | {r['calls']:,} | {r['tottime_s']:.2f} | {r['cumtime_s']:.2f} |")
    f = e2e["first"]
    out += ["", "Verdict: " + (
        f"first divergence `{f['kind']}` at A #{f['index_a']} {f['op']} ({f['source']}, {f['module']}), B #{f['index_b']}, "
        f"rel diff {f['rel_diff']:.3g}, {f['note']}; {e2e['inherited']:,}"
        f"{'' if e2e.get('inherited_complete', True) else ' (the verdict stops counting there)'} later records "
        f"inherited; "
        f"paired {e2e['paired']:,}, unpaired A {e2e['unpaired_a']} / B {e2e['unpaired_b']}."
        if f else "no divergence found."),
        "",
        f"Planted divergence found: **{'yes' if res['found_planted'] else 'NO'}** "
        f"(expected A #{p['index_a']} / B #{p['index_b']}, {p['op']})."]
    return "\n".join(out)


# -- section 3: aligner alone ---------------------------------------------------------------------


def section_sequence(quick: bool) -> dict[str, Any]:
    cmd = [sys.executable, str(BENCH / "bench_sequence.py")]
    if quick:
        cmd += ["--n", "100000", "--repeat", "1"]
    log(f"[sequence] {' '.join(Path(c).name if i < 2 else c for i, c in enumerate(cmd))} ...")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_sequence.py failed:\n{proc.stderr[-4000:]}")
    log(f"[sequence]   done in {time.perf_counter() - t0:.0f} s")
    return {"command": "python bench/bench_sequence.py" + (" --n 100000 --repeat 1" if quick else ""),
            "stdout": proc.stdout, "wall_s": time.perf_counter() - t0}


def table_sequence(res: dict[str, Any]) -> str:
    return f"`{res['command']}`:\n\n```\n{res['stdout'].rstrip()}\n```"


# -- main -------------------------------------------------------------------------------------------


def section_cuda(quick: bool, names: list[str] | None = None) -> dict[str, Any]:
    """bench/gpu.py: eager and inductor on the GPU sizes; skipped without CUDA."""
    import gpu
    import torch

    if not torch.cuda.is_available():
        log("[cuda] no CUDA device: skipped")
        return {"skipped": "No CUDA device on this machine: skipped (run on an NVIDIA GPU)."}
    workloads = names or (["transformer", "train_step"] if quick else list(gpu.WORKLOADS))
    return gpu.run_all(workloads, list(gpu.MODES), warmup=2 if quick else 3, reps=3 if quick else 10, timeout=600)


def section_light(quick: bool, names: list[str] | None = None) -> dict[str, Any]:
    """bench/light.py: plain compiled runs against the light mode's recording of them."""
    import light

    workloads = [n for n in names or () if n in light.WORKLOADS] or (["tiny_gpt"] if quick else list(light.WORKLOADS))
    return light.run_all(workloads, 100 if quick else None, 1 if quick else 2, ("plain", "light"))


def render(machine: dict[str, Any], results: dict[str, Any], command: str, wall: float) -> str:
    m = machine
    parts = [
        "# tracediff benchmark results",
        "",
        f"Command: `{command}` ({wall:.0f} s)",
        "",
        f"Machine: {m['nproc']} CPU cores ({m['cpu']}), {m['ram_gib']} GiB RAM, {m['platform']}; "
        f"Python {m['python']}, torch {m['torch']} ({m['torch_threads']} intra-op threads), "
        f"tracediff {m['tracediff']} (sha256 of tracediff/*.py: {m['source_digest']}); {m['date']}; "
        f"load average {m['loadavg'][0]:.2f} at start.",
    ]
    changed = [n for n, r in results.items() if r.get("source_changed")]
    if changed:
        parts += ["", f"**Warning:** tracediff/ sources changed while these sections ran: {', '.join(changed)}; "
                      f"their figures mix two code states."]
    if "overhead" in results:
        parts += ["", "## Recording overhead (eager, CPU)", "",
                  "Median ms per call (perf_counter around the whole `with` block: session set-up, header, "
                  "footer and file close included), configs interleaved in one process on the same inputs.",
                  "", table_overhead(results["overhead"])]
    if "diff" in results:
        parts += ["", "## Diff at scale", "", table_diff(results["diff"])]
    if "sequence" in results:
        parts += ["", "## Aligner alone (bench/bench_sequence.py)", "", table_sequence(results["sequence"])]
    if "cuda" in results:
        import gpu

        parts += ["", "## Recording overhead on CUDA (bench/gpu.py)", "",
                  results["cuda"].get("skipped") or gpu.table(results["cuda"])]
    if "light" in results:
        import light

        parts += ["", "## The light mode on a long training run (bench/light.py)", "",
                  "Wall time of the whole process (start, imports and compiles included), median over rounds; "
                  "`light` is the compiled run as `tracediff run --light` records and judges it.", "",
                  light.table(results["light"])]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="fast smoke run")
    ap.add_argument("--only", choices=SECTIONS, help="run one section")
    ap.add_argument("--workloads", help="overhead, cuda and light sections: these workloads only (comma-separated)")
    ap.add_argument("--diff-records", type=int, metavar="N",
                    help="diff section: a synthetic pair of N records, end to end only (e.g. 10000000: about 16 GB "
                         "on disk, generated once under bench/out/synth)")
    ap.add_argument("--child-memory", nargs=3, metavar=("WORKLOAD", "CONFIG", "CALLS"), help=argparse.SUPPRESS)
    ap.add_argument("--child-diff-e2e", nargs=2, metavar=("A", "B"), help=argparse.SUPPRESS)
    ap.add_argument("--child-diff-phases", nargs=2, metavar=("A", "B"), help=argparse.SUPPRESS)
    ap.add_argument("--child-profile-verdict", nargs=2, metavar=("A", "B"), help=argparse.SUPPRESS)
    ap.add_argument("--gc-check", action="store_true",
                    help="diff section: also time find_divergence with the cyclic GC off (one more full diff)")
    ap.add_argument("--breakdown", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--gc-off", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child_memory:
        w, c, calls = args.child_memory
        print(json.dumps(child_memory(w, c, int(calls))))
        return 0
    if args.child_diff_e2e:
        print(json.dumps(child_diff_e2e(*args.child_diff_e2e)))
        return 0
    if args.child_profile_verdict:
        print(json.dumps(child_profile_verdict(*args.child_profile_verdict)))
        return 0
    if args.child_diff_phases:
        print(json.dumps(child_diff_phases(*args.child_diff_phases, breakdown=args.breakdown, gc_off=args.gc_off)))
        return 0

    command = ("python bench/run.py" + (" --quick" if args.quick else "") + (f" --only {args.only}" if args.only else "")
               + (f" --workloads {args.workloads}" if args.workloads else "") + (" --gc-check" if args.gc_check else ""))
    workload_names = args.workloads.split(",") if args.workloads else None
    sections = [args.only] if args.only else [s for s in SECTIONS if not (args.quick and s == "sequence")]
    started = time.perf_counter()
    machine = machine_facts()
    log(f"tracediff bench: {', '.join(sections)}{' (quick)' if args.quick else ''}; "
        f"{machine['nproc']} cores, {machine['cpu']}, torch {machine['torch']}")
    runners: dict[str, Callable[[bool], dict[str, Any]]] = {
        "overhead": lambda quick: section_overhead(quick, workload_names),
        "diff": lambda quick: section_diff(quick, gc_check=args.gc_check, records=args.diff_records),
        "sequence": section_sequence,
        "cuda": lambda quick: section_cuda(quick, workload_names),
        "light": lambda quick: section_light(quick, workload_names),
    }
    results: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for name in sections:
        t0 = time.perf_counter()
        digest_before = source_digest()
        try:
            results[name] = runners[name](args.quick)
            results[name]["source_digest"] = digest_before
            if source_digest() != digest_before:
                results[name]["source_changed"] = source_digest()
                log(f"[{name}] WARNING: tracediff/ sources changed while this section ran")
        except Exception as e:  # one broken section (the package moves under us) must not lose the others
            import traceback

            failed[name] = f"{type(e).__name__}: {e}"
            log(f"[{name}] FAILED:\n{traceback.format_exc()}")
            continue
        log(f"[{name}] section done in {time.perf_counter() - t0:.0f} s")
    wall = time.perf_counter() - started
    text = render(machine, results, command, wall)
    for name, error in failed.items():
        text += f"\n## {name}: FAILED\n\n```\n{error[-3000:]}\n```\n"

    OUT.mkdir(parents=True, exist_ok=True)
    stem = "results" + (f"-{args.only}" if args.only else "") + ("-quick" if args.quick else "")
    (OUT / f"{stem}.md").write_text(text)
    (OUT / f"{stem}.json").write_text(json.dumps(
        {"command": command, "wall_s": wall, "machine": machine, "results": results, "failed": failed},
        indent=1, default=str))
    log(f"wrote {OUT / (stem + '.md')} and {OUT / (stem + '.json')} ({wall:.0f} s in all)")
    print(text)
    status = 0
    if failed:
        log(f"ERROR: section(s) failed: {', '.join(failed)}")
        status = 1
    if "diff" in results and not results["diff"]["found_planted"]:
        log("ERROR: the diff did not report the planted divergence")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
