"""CUDA recording overhead: plain vs tracediff vs DebugMode with hashes, eager and inductor.

    python bench/gpu.py                               # all workloads, eager and inductor
    python bench/gpu.py --workloads transformer --modes eager --reps 5
    python bench/run.py --only cuda                   # the same, as a `make bench` section

Each (workload, mode, config) runs in a fresh process on the GPU sizes of
bench/workloads.py (GPT-2 small with 6 layers, seq 1024, batch 8, ...), so
compile caches, hooks and allocator state never leak between configs:

- plain: no mode;
- tracediff: one `tracediff.record(path)` session around warm-up and timed calls
  (inductor compiles inside it, as under `tracediff run`, so its kernels are recorded);
- debugmode: one `DebugMode()` + `DebugMode.log_tensor_hashes(hash_inputs=True)` around the same.

'host ms' is the median time until the call returns (its GPU work may still be queued):
when tracediff's host time exceeds plain's device time, recording is bound by the host.
A call is timed from its start to `torch.cuda.synchronize()` after it (what a
training loop's `loss.item()` costs), median over the repetitions after
`--warmup` calls (the first compiles). Peak GPU memory is
`torch.cuda.max_memory_allocated()` over the timed calls. For tracediff the
child also reports records per call, trace bytes per record (plain and gzip -9)
and how many batches of fingerprints were read back (host waits).

'host loop ms' is the median time of a fixed pure-Python loop (`timing.python_loop_seconds`), run after each
timed call's synchronize, outside the timing: the host's speed while that config ran. The device machines'
hosts are shared and slow down by 1.4-1.9x for stretches of seconds; a recording's time follows the host's
speed, plain's (waiting on the device) barely does, so a tracediff figure is read next to its loop's.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

from timing import python_loop_seconds  # noqa: E402

WORKLOADS = ("hf_gpt2", "transformer", "train_step", "mlp", "cnn")
MODES = ("eager", "inductor")
CONFIGS = ("plain", "tracediff", "debugmode")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def child(workload: str, mode: str, config: str, warmup: int, reps: int) -> dict[str, Any]:
    import torch
    import workloads

    fn = workloads.make(workload, device="cuda", compiled=mode == "inductor")
    tmp = Path(tempfile.mkdtemp(prefix="tracediff-gpu-"))
    trace = tmp / "t.jsonl"
    stack = contextlib.ExitStack()
    session = dm = None
    if config == "tracediff":
        import tracediff

        session = stack.enter_context(tracediff.record(trace))
    elif config == "debugmode":
        from torch.utils._debug_mode import DebugMode

        dm = stack.enter_context(DebugMode())
        stack.enter_context(DebugMode.log_tensor_hashes(hash_inputs=True))
    times: list[float] = []
    cpu_times: list[float] = []
    loop_times: list[float] = []
    with stack:
        t0 = time.perf_counter()
        for _ in range(warmup):
            fn()
            torch.cuda.synchronize()
        warm_s = time.perf_counter() - t0
        records0 = session.writer.records + len(session.recorder._held) if session else 0
        fetches0 = _fetches(session)
        ops0 = len(dm.operators) if dm is not None else 0
        torch.cuda.reset_peak_memory_stats()
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            cpu_times.append(time.perf_counter() - t0)  # the host's part: GPU work may still be queued
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            loop_times.append(python_loop_seconds())
        peak = torch.cuda.max_memory_allocated()
        result: dict[str, Any] = {}
        if session is not None:
            recorder = session.recorder
            result["records_per_call"] = (recorder.writer.records + len(recorder._held) - records0) / reps
            result["fetches_per_call"] = (_fetches(session) - fetches0) / reps
            result["triton_fingerprints"] = bool(recorder.device_fingerprints and recorder.device_fingerprints.uses_triton)
        if dm is not None:
            result["debugmode_entries_per_call"] = (len(dm.operators) - ops0) / reps
    if session is not None:
        data = trace.read_bytes()
        records = data.count(b"\n") - 2
        result["trace_bytes_per_record"] = len(data) / max(records, 1)
        result["trace_gzip_bytes_per_record"] = len(gzip.compress(data, compresslevel=9, mtime=0)) / max(records, 1)
    result.update({
        "workload": workload, "mode": mode, "config": config, "warmup": warmup, "reps": reps,
        "warmup_s": warm_s, "median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
        "host_ms": statistics.median(cpu_times) * 1e3, "host_loop_ms": statistics.median(loop_times) * 1e3,
        "samples_ms": [round(t * 1e3, 3) for t in times], "peak_gpu_mib": peak / 2**20,
    })
    return result


def device_ms(f: Any, reps: int = 20) -> float:
    """Device time of one call of `f` in milliseconds (CUDA events around `reps` calls, after one)."""
    import torch

    f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        f()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def micro() -> dict[str, Any]:
    """The fingerprint alone: device time of one fingerprint vs `x.sum()` (a lower bound: one read),
    per kernel shape, and the host time of one `submit` (launch included)."""
    import torch

    from tracediff.record.fingerprints import kernel as fingerprint_kernel
    from tracediff.record.fingerprints.device import DeviceFingerprints

    rows = []
    for n in (2**20, 8 * 1024 * 768, 2**27):
        x = torch.randn(n, device="cuda")
        row: dict[str, Any] = {"n": n, "sum_ms": device_ms(lambda: x.sum())}  # noqa: B023 (called at once)
        for programs in (264, 1056):
            for block, warps in ((1024, 4), (2048, 8), (4096, 8)):
                out = torch.zeros((1, programs, fingerprint_kernel.STATS), dtype=torch.float64, device="cuda")
                launch = fingerprint_kernel.Launcher(block=block, warps=warps)
                row[f"p{programs}_b{block}_w{warps}_ms"] = device_ms(lambda: launch(x, out, 0))  # noqa: B023 (called at once)
        row["GBps_sum"] = n * 4 / row["sum_ms"] / 1e6
        rows.append(row)
    host = {}
    for name, env in (("triton", ""), ("torch", "torch")):
        os.environ["TRACEDIFF_DEVICE_FINGERPRINT"] = env
        fps = DeviceFingerprints()
        x = torch.randn(1000, device="cuda")
        for _ in range(100):
            fps.submit(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(2000):
            fps.submit(x)
        host[f"submit_us_{name}"] = (time.perf_counter() - t0) / 2000 * 1e6
        fps.finish()
    y = torch.randn(1000, device="cuda")
    t0 = time.perf_counter()
    for _ in range(2000):
        torch.sin(y)
    host["torch_sin_us"] = (time.perf_counter() - t0) / 2000 * 1e6
    import tracediff

    with tempfile.TemporaryDirectory() as tmp:
        with tracediff.record(Path(tmp) / "t.jsonl"):
            for _ in range(100):
                torch.sin(y)
            t0 = time.perf_counter()
            for _ in range(2000):
                torch.sin(y)
            host["recorded_sin_us"] = (time.perf_counter() - t0) / 2000 * 1e6
    return {"kernel": rows, "host": host}


def _fetches(session: Any) -> int:
    device = session.recorder.device_fingerprints if session is not None else None
    return device.fetches if device is not None else 0


def run_all(workloads: list[str], modes: list[str], warmup: int, reps: int, timeout: float,
            configs: list[str] | None = None) -> dict[str, Any]:
    import torch

    rows = []
    for workload in workloads:
        for mode in modes:
            row: dict[str, Any] = {"workload": workload, "mode": mode}
            for config in configs or CONFIGS:
                log(f"[cuda] {workload} / {mode} / {config} ...")
                cmd = [sys.executable, str(Path(__file__).resolve()), "--child", workload, mode, config,
                       "--warmup", str(warmup), "--reps", str(reps)]
                t0 = time.perf_counter()
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
                except subprocess.TimeoutExpired:
                    row[config] = {"error": f"timed out after {timeout:.0f} s"}
                    log("[cuda]   timed out")
                    continue
                if proc.returncode != 0:
                    row[config] = {"error": proc.stderr.strip().splitlines()[-1][:300] if proc.stderr.strip() else "failed"}
                    log(f"[cuda]   failed: {proc.stderr[-2000:]}")
                    continue
                row[config] = json.loads(proc.stdout.strip().splitlines()[-1])
                log(f"[cuda]   {row[config]['median_ms']:.2f} ms/call ({time.perf_counter() - t0:.0f} s)")
            rows.append(row)
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows,
            "warmup": warmup, "reps": reps}


def table(res: dict[str, Any]) -> str:
    out = [f"Device: {res['device']}, torch {res['torch']}; median ms per call (to `torch.cuda.synchronize()`), "
           f"{res['reps']} timed calls after {res['warmup']} warm-up calls, one process per config.", "",
           "| workload | mode | plain ms | tracediff ms | DebugMode ms | tracediff / plain | DebugMode / plain "
           "| tracediff / DebugMode | host ms: plain / tracediff | host loop ms: plain / tracediff | peak GPU MiB: plain / tracediff / DebugMode | records per call "
           "| fingerprint reads per call | trace bytes/record: jsonl / gz |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in res["rows"]:
        p, t, d = (row.get(c, {}) for c in CONFIGS)
        def ms(r: dict[str, Any]) -> str:
            return "err" if "median_ms" not in r else f"{r['median_ms']:.2f}"

        def ratio(a: dict[str, Any], b: dict[str, Any]) -> str:
            return "-" if "median_ms" not in a or "median_ms" not in b else f"{a['median_ms'] / b['median_ms']:.2f}x"

        mem = " / ".join("-" if "peak_gpu_mib" not in r else f"{r['peak_gpu_mib']:.0f}" for r in (p, t, d))
        size = ("-" if "trace_bytes_per_record" not in t
                else f"{t['trace_bytes_per_record']:.0f} / {t['trace_gzip_bytes_per_record']:.0f}")
        host = " / ".join("-" if "host_ms" not in r else f"{r['host_ms']:.1f}" for r in (p, t))
        loop = " / ".join("-" if "host_loop_ms" not in r else f"{r['host_loop_ms']:.2f}" for r in (p, t))
        out.append(f"| {row['workload']} | {row['mode']} | {ms(p)} | {ms(t)} | {ms(d)} | {ratio(t, p)} | {ratio(d, p)} "
                   f"| {ratio(t, d)} | {host} | {loop} | {mem} | {t.get('records_per_call', '-')} | {t.get('fetches_per_call', '-')} | {size} |")
    errors = [f"- {row['workload']} / {row['mode']} / {c}: {row[c]['error']}" for row in res["rows"]
              for c in CONFIGS if "error" in row.get(c, {})]
    if errors:
        out += ["", "Failed configs:", *errors]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--configs", default=",".join(CONFIGS), help="plain, tracediff, debugmode (comma-separated)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per config process")
    ap.add_argument("--out", type=Path, default=BENCH / "out" / "results-cuda.json")
    ap.add_argument("--child", nargs=3, metavar=("WORKLOAD", "MODE", "CONFIG"), help=argparse.SUPPRESS)
    ap.add_argument("--micro", action="store_true", help="fingerprint kernel alone: device and host time")
    args = ap.parse_args(argv)
    if args.micro:
        print(json.dumps(micro(), indent=1))
        return 0
    if args.child:
        print(json.dumps(child(*args.child, warmup=args.warmup, reps=args.reps)))
        return 0
    import torch

    if not torch.cuda.is_available():
        log("bench/gpu.py: no CUDA device; nothing measured")
        return 0
    res = run_all(args.workloads.split(","), args.modes.split(","), args.warmup, args.reps, args.timeout,
                  args.configs.split(","))
    res["command"] = "python bench/gpu.py " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    text = table(res)
    args.out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
