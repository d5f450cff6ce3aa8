"""Compressed traces (`.jsonl.zst`, `.jsonl.gz`) against plain ones: size, recording cost, diff time.

    python bench/compressed_traces.py sizes TRACE...            # bytes per record: plain, zstd -1 / -3, gzip
    python bench/compressed_traces.py overhead [WORKLOAD...]    # recording cost, plain and .zst sessions taking turns
    python bench/compressed_traces.py record SCRIPT [--args='--steps 10']   # `tracediff record` to .jsonl and .jsonl.zst, taking turns
    python bench/compressed_traces.py diff [--records N]        # diff_traces on the synthetic pair, plain against .zst

Each writes a markdown table to stdout (progress to stderr) and its raw numbers to
bench/out/compressed-traces-<section>.json. Timings on a shared machine are noisy: each
section measures its cases side by side, taking turns, and reports medians and ratios.

sizes     each trace's records are written again through `TraceWriter` under each name
          (`.jsonl`, `.jsonl.zst` at zstd levels 1 and 3, `.jsonl.gz`), as the recorder
          writes them (a flush every few hundred records), and timed per record; and a plain
          trace without its digest index (trace/digest_index.py), what the index costs.
overhead  bench/workloads.py's workloads in one process: rounds of one recording session
          per case (no recording, a plain trace, one without its digest index, .zst with
          zstd's worker thread, .zst compressed on the recording thread), the cases taking
          turns, each session a warm-up call and timed calls. Wall time, and the recording
          thread's own CPU time.
record    whole recordings of a script, `tracediff record -o t.jsonl` and `-o t.jsonl.zst` taking
          turns, each in a fresh process: the footer's recorded time, the process's CPU, the size.
diff      the synthetic pair of bench/synth.py (`make bench`'s diff section), and the same
          pair written as .jsonl.zst: `diff_traces` end to end in fresh subprocesses, the
          two taking turns.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import zstandard  # noqa: E402

from tracediff.trace import writer as writer_module  # noqa: E402
from tracediff.trace import zstd_file  # noqa: E402
from tracediff.trace.digest_index import index_path  # noqa: E402
from tracediff.trace.reader import Trace, read_footer  # noqa: E402
from tracediff.trace.writer import TraceWriter  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _OnTheRecordingThread(zstd_file.ZstdTraceFile):
    """The alternatives to the writer thread, for comparison: zstd compressing on the recording thread itself
    (`threads=0`), or in zstd's own worker threads (`threads=1`), each flush ending a block there."""

    threads = 0

    def __init__(self, path: Path, level: int | None = None) -> None:
        super().__init__(path, level)
        self._batches.put(None)  # this variant writes itself: the writer thread ends at once
        self._writer.join()
        compressor = zstandard.ZstdCompressor(level=self._level, threads=self.threads)
        self._stream = compressor.stream_writer(self._raw, closefd=False, write_return_read=True)

    def write(self, data: bytes) -> int:
        return self._stream.write(data)

    def flush(self) -> None:
        if not self._raw.closed:
            self._stream.flush(zstandard.FLUSH_BLOCK)
            self._raw.flush()

    def _finish_records(self) -> bool:
        if self._raw.closed:
            return False
        self._stream.flush(zstandard.FLUSH_FRAME)
        return True


class _InZstdWorkers(_OnTheRecordingThread):
    threads = 1


# How a case writes .jsonl.zst: the shipped writer thread, or an alternative.
ZSTD_WRITERS: dict[str, type[zstd_file.ZstdTraceFile]] = {
    "writer thread": zstd_file.ZstdTraceFile, "recording thread": _OnTheRecordingThread,
    "zstd worker": _InZstdWorkers}


@contextmanager
def zstd_settings(level: int, how: str) -> Iterator[None]:
    """TraceWriter's zstd level, and where it compresses, for the cases compared here."""
    saved = zstd_file.LEVEL, writer_module.ZstdTraceFile
    zstd_file.LEVEL = level
    writer_module.ZstdTraceFile = ZSTD_WRITERS.get(how, ZSTD_WRITERS["writer thread"])  # type: ignore[misc]
    try:
        yield
    finally:
        zstd_file.LEVEL, writer_module.ZstdTraceFile = saved


class _NoIndex:
    """A digest index writer that writes nothing: traces as they were before the index (the writing cost's baseline)."""

    def __init__(self, *args: Any) -> None:
        pass

    def add(self, *args: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def silence_in_child(self) -> None:
        pass


@contextmanager
def index_setting(how: str) -> Iterator[None]:
    """`how` "no index": TraceWriter writes no digest index."""
    saved = writer_module.DigestIndexWriter
    if how == "no index":
        writer_module.DigestIndexWriter = _NoIndex  # type: ignore[misc, assignment]
    try:
        yield
    finally:
        writer_module.DigestIndexWriter = saved  # type: ignore[misc]


# (name, trace suffix, zstd level, where zstd compresses, or "no index")
SIZE_CASES = [("plain, no digest index", ".jsonl", 1, "no index"), ("plain", ".jsonl", 1, "writer thread"), ("zstd -1", ".jsonl.zst", 1, "writer thread"),
              ("zstd -3", ".jsonl.zst", 3, "writer thread"), ("gzip -9", ".jsonl.gz", 1, "writer thread"),
              ("zstd -1 on the recording thread", ".jsonl.zst", 1, "recording thread"),
              ("zstd -1 in zstd's worker", ".jsonl.zst", 1, "zstd worker")]


def section_sizes(traces: list[str], repeats: int) -> dict[str, Any]:
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="tracediff-bench-zst-"))
    for path in traces:
        trace = Trace(path)
        header = {k: v for k, v in trace.header.items() if k not in ("t", "schema")}
        records = list(trace)
        footer = {k: v for k, v in (trace.footer or {}).items() if k not in ("t", "complete", "records")}
        row: dict[str, Any] = {"trace": path, "records": len(records), "cases": {}}
        times: dict[str, dict[str, list[float]]] = {c[0]: {"wall": [], "cpu": []} for c in SIZE_CASES}
        for _ in range(repeats):  # the cases take turns, so that the machine's load hits them alike
            for name, suffix, level, how in SIZE_CASES:
                out = tmp / f"t{suffix}"
                with zstd_settings(level, how), index_setting(how):
                    t0, c0 = time.perf_counter(), time.thread_time()
                    writer = TraceWriter(out, header)
                    for record in records:
                        writer.write(record)
                    writer.close(footer)
                    times[name]["wall"].append((time.perf_counter() - t0) * 1e6 / len(records))
                    times[name]["cpu"].append((time.thread_time() - c0) * 1e6 / len(records))
                row["cases"][name] = {"bytes": out.stat().st_size, "bytes_per_record": out.stat().st_size / len(records)}
                out.unlink()
        for name, t in times.items():
            row["cases"][name].update({f"{k}_us_per_record_{stat.__name__}": stat(v) for k, v in t.items()
                                       for stat in (min, statistics.median)})
            log(f"[sizes] {Path(path).name} {name}: {row['cases'][name]['bytes_per_record']:.0f} B/record, "
                f"write {min(t['wall']):.2f} us/record wall, {min(t['cpu']):.2f} us/record on the writing thread "
                f"(best of {repeats})")
        rows.append(row)
    return {"rows": rows, "repeats": repeats}


def table_sizes(res: dict[str, Any]) -> str:
    sized = ["plain", "zstd -1", "zstd -3", "gzip -9"]
    out = ["Bytes per record, and the compression ratio against plain:", "",
           "| trace | records | " + " | ".join(sized) + " | plain / zstd -1 | plain / zstd -3 | plain / gzip -9 |",
           "|---|---:|" + "---:|" * (len(sized) + 3)]
    for row in res["rows"]:
        c = row["cases"]
        out.append(f"| {Path(row['trace']).name} | {row['records']:,} | "
                   + " | ".join(f"{c[n]['bytes_per_record']:.0f}" for n in sized) + " | "
                   + " | ".join(f"{c['plain']['bytes'] / c[n]['bytes']:.1f}x" for n in sized[1:]) + " |")
    out += ["", f"Writing the records through `TraceWriter` (JSON encoding included), us per record, best of "
                f"{res['repeats']} with the cases taking turns (median in brackets): wall, and the CPU time of "
                f"the thread that writes (the recording thread, in a recording):", "",
            "| trace | case | wall | writing thread's CPU |", "|---|---|---:|---:|"]
    for row in res["rows"]:
        for name, c in row["cases"].items():
            out.append(f"| {Path(row['trace']).name} | {name} | {c['wall_us_per_record_min']:.2f} "
                       f"({c['wall_us_per_record_median']:.2f}) | {c['cpu_us_per_record_min']:.2f} "
                       f"({c['cpu_us_per_record_median']:.2f}) |")
    return "\n".join(out)


# (name, trace suffix or None for no recording, zstd level, where zstd compresses)
OVERHEAD_CASES = [("none", None, 1, "writer thread"), ("plain", ".jsonl", 1, "writer thread"),
                  ("plain, no digest index", ".jsonl", 1, "no index"),
                  ("zstd -1", ".jsonl.zst", 1, "writer thread"),
                  ("zstd -1 on the recording thread", ".jsonl.zst", 1, "recording thread"),
                  ("zstd -1 in zstd's worker", ".jsonl.zst", 1, "zstd worker")]


def _timed_session(fn: Any, path: Path | None, calls: int) -> dict[str, list[float]]:
    """Per call of `calls` in one session: wall, the recording thread's CPU and the process's CPU seconds;
    and the session's wall time, its close included."""
    import tracediff

    samples: dict[str, list[float]] = {"wall": [], "cpu": [], "process_cpu": []}
    t_session = time.perf_counter()
    with (tracediff.record(path) if path is not None else _nothing()):
        fn()  # warm-up: the first call reads the weights
        for _ in range(calls):
            t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            fn()
            samples["wall"].append(time.perf_counter() - t0)
            samples["cpu"].append(time.thread_time() - c0)
            samples["process_cpu"].append(time.process_time() - p0)
    samples["session"] = [time.perf_counter() - t_session]
    return samples


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def overhead_of(workload: str, rounds: int, calls: int, tmp: Path) -> dict[str, Any]:
    import workloads

    fn = workloads.make(workload)
    samples: dict[str, dict[str, list[float]]] = {
        c[0]: {"wall": [], "cpu": [], "process_cpu": [], "session": []} for c in OVERHEAD_CASES}
    records = 0
    sizes: dict[str, int] = {}
    for _ in range(rounds):
        for name, suffix, level, how in OVERHEAD_CASES:
            path = tmp / f"{workload}{suffix}" if suffix else None
            with zstd_settings(level, how), index_setting(how):
                for key, values in _timed_session(fn, path, calls).items():
                    samples[name][key] += values
            if path is not None:
                sizes[name] = path.stat().st_size
                records = records or _records(path)
    stats = {name: {k: {"min": min(v), "median": statistics.median(v)} for k, v in s.items()}
             for name, s in samples.items()}
    return {"workload": workload, "rounds": rounds, "calls": calls, "records_per_session": records,
            "records_per_call": records / (calls + 1) if records else None, "stats_s": stats, "bytes": sizes,
            "samples_ms": {n: {k: [round(x * 1e3, 3) for x in v] for k, v in s.items()} for n, s in samples.items()}}


def _records(path: Path) -> int:
    trace = Trace(path)
    for _ in trace:
        pass
    return int((trace.footer or {}).get("records") or 0)


def section_overhead(names: list[str], rounds: int, calls: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="tracediff-bench-zst-"))
    rows = []
    for name in names:
        log(f"[overhead] {name}: {rounds} rounds of {calls} calls per case ...")
        row = overhead_of(name, rounds, calls, tmp)
        m = row["stats_s"]
        log("[overhead]   best: " + ", ".join(f"{c}: {m[c]['wall']['min'] * 1e3:.2f} ms" for c in m))
        rows.append(row)
    return {"rows": rows}


def table_overhead(res: dict[str, Any]) -> str:
    names = [c[0] for c in OVERHEAD_CASES]
    out = ["Per call, ms, best of the rounds (median in brackets). Wall:", "",
           "| workload | records per call | " + " | ".join(names) + " |", "|---|---:|" + "---:|" * len(names)]
    for row in res["rows"]:
        m = row["stats_s"]
        out.append(f"| {row['workload']} | {row['records_per_call']:.0f} | " + " | ".join(
            f"{m[n]['wall']['min'] * 1e3:.2f} ({m[n]['wall']['median'] * 1e3:.2f})" for n in names) + " |")
    out += ["", "The recording thread's own CPU time:", "",
            "| workload | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for row in res["rows"]:
        m = row["stats_s"]
        out.append(f"| {row['workload']} | " + " | ".join(
            f"{m[n]['cpu']['min'] * 1e3:.2f} ({m[n]['cpu']['median'] * 1e3:.2f})" for n in names) + " |")
    out += ["", "Against the plain trace, on the best calls (wall / recording thread's CPU):", "",
            "| workload | " + " | ".join(names[2:]) + " |", "|---|" + "---:|" * len(names[2:])]
    for row in res["rows"]:
        m = row["stats_s"]
        out.append(f"| {row['workload']} | " + " | ".join(
            f"{m[n]['wall']['min'] / m['plain']['wall']['min']:.3f} / {m[n]['cpu']['min'] / m['plain']['cpu']['min']:.3f}"
            for n in names[2:]) + " |")
    return "\n".join(out)


def section_record(script: str, script_args: list[str], rounds: int) -> dict[str, Any]:
    """`tracediff record SCRIPT -o t.jsonl` and `-o t.jsonl.zst`, taking turns, each a fresh process."""
    tmp = Path(tempfile.mkdtemp(prefix="tracediff-bench-zst-"))
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "zstd -1": []}
    for _ in range(rounds):
        for name, suffix in (("plain", ".jsonl"), ("zstd -1", ".jsonl.zst")):
            trace = tmp / f"t{suffix}"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "tracediff.cli", "record", script, "--backend", "eager", "-o",
                            str(trace), "--", *script_args], check=True, capture_output=True, cwd=Path(script).parent)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            footer = read_footer(trace) or {}
            runs[name].append({"recorded_s": footer.get("elapsed_s"), "process_s": wall, "bytes": trace.stat().st_size,
                               "records": footer.get("records"),
                               "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)})
            log(f"[record] {name}: recorded {footer.get('elapsed_s')} s, {trace.stat().st_size / 2**20:.1f} MiB")
    return {"script": script, "args": script_args, "rounds": rounds, "runs": runs}


def table_record(res: dict[str, Any]) -> str:
    runs = res["runs"]
    ratios = [z["recorded_s"] / p["recorded_s"] for p, z in zip(runs["plain"], runs["zstd -1"])]
    command = " ".join([Path(res["script"]).name, *res["args"]])
    out = [f"`tracediff record {command}`, eager, {res['rounds']} rounds, "
           f"plain and .zst taking turns ({runs['plain'][0]['records']:,} records):", "",
           "| trace | recorded time (footer's elapsed_s), each round | median | CPU of the process, median | size |",
           "|---|---|---:|---:|---:|"]
    for name, each in runs.items():
        times = [r["recorded_s"] for r in each]
        out.append(f"| {name} | {', '.join(f'{t:.2f}' for t in times)} s | {statistics.median(times):.2f} s | "
                   f"{statistics.median(r['cpu_s'] for r in each):.2f} s | {each[0]['bytes'] / 2**20:.1f} MiB |")
    cpu = [z["cpu_s"] / p["cpu_s"] for p, z in zip(runs["plain"], runs["zstd -1"])]
    out += ["", f"Round by round, .zst / plain, recorded time: {', '.join(f'{r:.2f}' for r in ratios)} "
                f"(median {statistics.median(ratios):.3f}); the process's CPU time: "
                f"{', '.join(f'{r:.2f}' for r in cpu)} (median {statistics.median(cpu):.3f})."]
    return "\n".join(out)


def zst_copy(plain: Path) -> Path:
    """The plain trace written again as .jsonl.zst, line for line (the records are not parsed), with the plain
    trace's digest index: its entries are of the same lines."""
    target = plain.with_name(plain.name + ".zst")
    if index_path(plain).exists():
        shutil.copyfile(index_path(plain), index_path(target))
    if target.exists() and target.stat().st_mtime >= plain.stat().st_mtime:
        return target
    partial = target.with_name(target.name + ".partial")
    out = zstd_file.ZstdTraceFile(partial)
    with open(plain, "rb") as f:
        lines = iter(f)
        previous = next(lines)
        for count, line in enumerate(lines, start=1):
            out.write(previous)
            previous = line
            if count % 256 == 0:
                out.flush()
    out.close_with_last_line(previous)
    partial.rename(target)
    return target


def child_diff(a: str, b: str) -> dict[str, Any]:
    from tracediff.config import Config
    from tracediff.diff.engine import diff_traces

    t0 = time.perf_counter()
    result = diff_traces(a, b, Config())
    first = result.first
    return {"wall_s": time.perf_counter() - t0, "first_a": first.a.index if first else None}


def section_diff(records: int, repeats: int) -> dict[str, Any]:
    import synth

    folder, meta = synth.cached(OUT / "synth", records, edits=400 if records >= 1_000_000 else 40, progress=log)
    plain = [folder / "a.jsonl", folder / "b.jsonl"]
    log("[diff] the pair as .jsonl.zst (once, cached beside it) ...")
    zst = [zst_copy(p) for p in plain]
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "zst": []}
    for _ in range(repeats):
        for name, pair in (("plain", plain), ("zst", zst)):
            cmd = [sys.executable, __file__, "child-diff", *map(str, pair)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
            runs[name].append(json.loads(proc.stdout.splitlines()[-1]))
            log(f"[diff]   {name}: {runs[name][-1]['wall_s']:.1f} s")
    return {"records": meta["records_a"], "bytes": {n: [p.stat().st_size for p in pair] for n, pair in
                                                    (("plain", plain), ("zst", zst))},
            "planted_a": meta["planted"]["index_a"], "runs": runs}


def table_diff(res: dict[str, Any]) -> str:
    walls = {n: [r["wall_s"] for r in runs] for n, runs in res["runs"].items()}
    med = {n: statistics.median(w) for n, w in walls.items()}
    found = all(r["first_a"] == res["planted_a"] for runs in res["runs"].values() for r in runs)
    out = ["| pair | A + B size | diff_traces wall, each run | median | ratio to plain |", "|---|---:|---|---:|---:|"]
    for name in ("plain", "zst"):
        size = sum(res["bytes"][name]) / 2**20
        out.append(f"| {name} | {size:.0f} MiB | {', '.join(f'{w:.1f} s' for w in walls[name])} | "
                   f"{med[name]:.1f} s | {med[name] / med['plain']:.2f} |")
    out.append("")
    out.append(f"{res['records']:,} records a trace; the planted divergence found in every run: {found}.")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="section", required=True)
    sizes = sub.add_parser("sizes")
    sizes.add_argument("traces", nargs="+")
    sizes.add_argument("--repeats", type=int, default=5)
    overhead = sub.add_parser("overhead")
    overhead.add_argument("workloads", nargs="*", default=["transformer", "train_step"])
    overhead.add_argument("--rounds", type=int, default=5)
    overhead.add_argument("--calls", type=int, default=4)
    diff = sub.add_parser("diff")
    diff.add_argument("--records", type=int, default=1_000_000)
    diff.add_argument("--repeats", type=int, default=2)
    record = sub.add_parser("record")
    record.add_argument("script")
    record.add_argument("--args", default="", help="the script's arguments, as one string: --args='--steps 10'")
    record.add_argument("--rounds", type=int, default=5)
    child = sub.add_parser("child-diff")
    child.add_argument("a")
    child.add_argument("b")
    args = parser.parse_args()
    if args.section == "child-diff":
        print(json.dumps(child_diff(args.a, args.b)))
        return
    if args.section == "sizes":
        res, table = section_sizes(args.traces, args.repeats), table_sizes
    elif args.section == "record":
        res, table = section_record(str(Path(args.script).resolve()), shlex.split(args.args), args.rounds), table_record
    elif args.section == "overhead":
        res, table = section_overhead(args.workloads, args.rounds, args.calls), table_overhead
    else:
        res, table = section_diff(args.records, args.repeats), table_diff
    res["machine"] = {"nproc": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                      "loadavg": list(os.getloadavg())}
    OUT.mkdir(exist_ok=True)
    (OUT / f"compressed-traces-{args.section}.json").write_text(json.dumps(res, indent=1))
    print(table(res))


if __name__ == "__main__":
    main()
