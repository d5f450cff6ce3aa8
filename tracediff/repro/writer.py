"""`tracediff repro`: from a diverged run to a folder with a standalone script.

1. Find the first divergence (the run directory's report.json, or a fresh
   diff of two traces) and the ops to replay: the pinned op, or the ops of
   the fused kernel it stops at (the candidates), all on the reference side A.
2. Re-run the reference script exactly as recorded (same backend, seed,
   folder) with those ops' arguments captured by record index, and check the
   re-run reached the same ops with the same input values.
3. Write repro.py + inputs.pt (+ the script's own modules) and, unless told
   not to, run repro.py once to say whether it reproduces on its own.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map_only

from tracediff.config import Config
from tracediff.diff.compare import compare_fingerprints
from tracediff.errors import ExitCode, Interrupted, UserError, interrupt_keeps
from tracediff.launch.launcher import record_in_subprocess
from tracediff.launch.recording import Recording
from tracediff.outcome import Cause, Divergence, Outcome, Verdict
from tracediff.outputs import RunDir, ensure_dir
from tracediff.repro.capture import CAPTURE_FORMAT, OutputRef
from tracediff.repro.script import InputName, ReproSpec, render_script
from tracediff.trace.reader import Trace, read_footer, records_at
from tracediff.trace.schema import OP, Header, TraceRecord

SCRIPT_NAME = "repro.py"
INPUTS_NAME = "inputs.pt"


@dataclass(frozen=True)
class Recorded:
    """A run's outcome (its first divergence) and the two recordings it came from."""

    outcome: Outcome
    trace_a: Path
    trace_b: Path
    run_dir: Path | None

    # Read when first needed, not on load: a failed run's trace may have no header to read.
    @cached_property
    def header_a(self) -> Header:
        return Trace(self.trace_a).header

    @cached_property
    def header_b(self) -> Header:
        return Trace(self.trace_b).header


def _fallback_random(header: Header) -> bool | None:
    """Whether a recorded run had inductor call eager's random ops (None where inductor could not run: its
    settings are not recorded then)."""
    return ((header.get("settings") or {}).get("inductor") or {}).get("fallback_random")


def load_divergence(paths: list[str], config: Config) -> Recorded:
    """A run directory (with report.json) or two traces -> the outcome to reproduce."""
    if len(paths) == 1:
        run_dir = Path(paths[0])
        if not run_dir.exists():
            raise UserError(f"{run_dir}: no such run directory")
        if not run_dir.is_dir():
            raise UserError(f"{run_dir}: not a run directory; pass the folder `tracediff run` wrote, or two traces")
        report_path = RunDir(run_dir).report_json
        if not report_path.is_file():
            raise UserError(f"{run_dir}: no report.json; pass the folder `tracediff run` wrote, or two traces")
        try:
            report = json.loads(report_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            raise UserError(f"{report_path}: not a JSON report (damaged?)") from None
        traces = report.get("traces") or []
        if len(traces) != 2:
            raise UserError(f"{report_path}: the report names no two traces")
        if report.get("verdict") not in {v.value for v in Verdict}:
            raise UserError(f"{report_path}: not a tracediff report (no verdict)")
        trace_a, trace_b = (_beside(Path(t), run_dir) for t in traces)
        outcome = Outcome.from_json(report)
        if outcome.same_inputs is not None:
            # A verdict of calls judged on their inputs names no op of trace A to replay: the traces' own rules do.
            outcome = _by_trace_rules(trace_a, trace_b, config)
        return Recorded(outcome, trace_a, trace_b, run_dir)
    if len(paths) == 2:
        return Recorded(_by_trace_rules(Path(paths[0]), Path(paths[1]), config), Path(paths[0]), Path(paths[1]), None)
    raise UserError("tracediff repro takes a run directory or two traces (reference first)")


def _by_trace_rules(trace_a: Path, trace_b: Path, config: Config) -> Outcome:
    """The traces' first divergence by their own rules (an op of A, which a repro replays), whatever checks of
    calls judged on their inputs trace B holds."""
    from tracediff.diff.decide import decide
    from tracediff.diff.engine import diff_traces

    trace_only = dataclasses.replace(config, same_inputs=False)
    return decide(diff_traces(trace_a, trace_b, trace_only), [str(trace_a), str(trace_b)], trace_only)


def _beside(trace: Path, run_dir: Path) -> Path:
    """A trace named in a report: as written, else by name in the run directory (the folder was moved)."""
    if trace.exists():
        return trace
    moved = run_dir / trace.name
    if moved.exists():
        return moved
    raise UserError(f"{trace}: the trace named in the report is gone")


def ops_to_replay(divergence: Recorded) -> list[TraceRecord]:
    """Reference-side op records of the divergent op, or of the fused kernel's ops, in order."""
    first = divergence.outcome.first_divergence
    assert first is not None
    if first.cause is Cause.STRUCTURE:
        raise UserError("the first difference is structural (a record present in one run only), "
                        "not a value divergence: there is no op to replay")
    wanted = {c.index for c in first.candidates if c.index is not None}
    if not wanted and first.site.index is not None:
        wanted = {first.site.index}
    found = records_at(divergence.trace_a, wanted)
    ops = [found[i] for i in sorted(found) if found[i].get("t") == OP]
    if not ops:
        raise UserError(f"the first divergence (record #{first.site.index}) is a compiled region or kernel of the "
                        "reference run, not an op: record the reference with --backends eager,... to replay ops")
    return ops


def capture_arguments(divergence: Recorded, records: list[TraceRecord], config: Config, work: Path,
                      echo: Callable[[str], None]) -> tuple[list[dict[str, Any]], list[str]]:
    """Re-run the reference and return the captured ops plus notes on how faithful the re-run was."""
    header = divergence.header_a
    command = header.get("command") or []
    cwd = header.get("cwd") or "."
    if not command:
        raise UserError(f"{divergence.trace_a}: the trace does not say which script it recorded")
    script = Path(cwd) / command[0]
    if not script.is_file():
        raise UserError(f"{script}: the recorded script is gone; repro re-runs it to capture the op's inputs")
    backend = header.get("backend")
    indices = [r["i"] for r in records]
    trace = work / "capture.jsonl"
    captured_path = work / "captured.pt"
    echo(f"tracediff: re-running {command[0]} ({backend}) to capture the inputs of record(s) "
         f"{', '.join(f'#{i}' for i in indices)}")
    # Recorded again as the reference was: its seed, exactness, fallback_random and materialization.
    recording = Recording(None if backend == "as-written" else backend, header.get("seed"), bool(header.get("exact")),
                          _fallback_random(header), config.timeout, bool(header.get("materialized")),
                          capture=tuple(indices), capture_out=captured_path)
    run = record_in_subprocess(script, command[1:], recording, trace, echo, cwd=cwd)
    if not captured_path.is_file():
        raise ReproRunFailed(f"the re-run of the reference failed before the capture was saved: "
                             f"{run.failure() or 'no capture written'}")
    saved = torch.load(captured_path, weights_only=False)  # written by our own child just now
    if saved.get("format") != CAPTURE_FORMAT:
        raise ReproRunFailed(f"{captured_path}: capture format {saved.get('format')!r}, expected {CAPTURE_FORMAT}")
    ops = saved["ops"]
    missing = sorted(set(indices) - {op["index"] for op in ops})
    if missing:
        raise ReproRunFailed(f"the re-run of the reference never reached record(s) {missing}: "
                             "the script does not run the same way twice")
    return ops, _compare_rerun(records, trace, config)


def _compare_rerun(records: list[TraceRecord], rerun_trace: Path, config: Config) -> list[str]:
    """Notes where the re-run's records differ from the recorded ones (a nondeterministic script)."""
    notes: list[str] = []
    rerun = records_at(rerun_trace, (r["i"] for r in records))
    for original in records:
        record = rerun[original["i"]]  # the capture saw every index, so the re-run recorded it
        if record.get("op") != original.get("op"):
            raise ReproRunFailed(f"the re-run recorded {record.get('op')} at #{record['i']} where the trace has "
                                 f"{original.get('op')}: the script does not run the same way twice")
        for new, old in zip(record.get("in") or [], original.get("in") or []):
            fp_new, fp_old = new.get("fp"), old.get("fp")
            if fp_new and fp_old:
                tolerance = config.tolerance_for(old["dt"], original["op"], original.get("m"), old.get("dev", "cpu"))
                if not compare_fingerprints(fp_old, fp_new, tolerance).ok:
                    notes.append(f"input {old['a']!r} of #{record['i']} {record['op']} differs from the recorded "
                                 "value in the re-run (nondeterministic script?); the repro uses the re-run's value")
    return notes


class ReproRunFailed(Exception):
    """The reference could not be re-run faithfully (exit 3: a run failed)."""


def build_spec(divergence: Recorded, records: list[TraceRecord], ops: list[dict[str, Any]],
               backend: str, local_modules: list[str], config: Config) -> tuple[ReproSpec, dict[str, torch.Tensor]]:
    """Name the captured tensors, decide what `program` returns, and describe the divergence."""
    inputs: dict[str, torch.Tensor] = {}

    def name_tensor(t: torch.Tensor) -> InputName:
        name = InputName(f"x{len(inputs)}")
        inputs[name] = t
        return name

    named = [dict(op, args=tree_map_only(torch.Tensor, name_tensor, op["args"]),
                  kwargs=tree_map_only(torch.Tensor, name_tensor, op["kwargs"])) for op in ops]
    consumed = {leaf.index for op in named for leaf in tree_leaves((op["args"], op["kwargs"]))
                if isinstance(leaf, OutputRef)}
    returns = [f"v{op['index']}" for op in named if op["index"] not in consumed]
    by_index = {r["i"]: r for r in records}
    comments = {i: f"{r.get('src') or '?'}  {(r.get('code') or '').strip()}".rstrip() for i, r in by_index.items()}

    first = divergence.outcome.first_divergence
    assert first is not None
    rtol, atol = _tolerance(first, records[-1], config)
    fallback_random = bool(_fallback_random(divergence.header_b))
    context = [f"Recorded: {first.site.op} at {first.site.source}"
               + (f" in module {first.site.module}" if first.site.module else "")
               + (f", rel diff {first.rel_diff:.3g}" if first.rel_diff is not None else "") + ".",
               f"Reference trace: {divergence.trace_a}",
               f"Compared trace:  {divergence.trace_b}"]
    if len(named) > 1:
        context.append(f"The divergence sits in a fused kernel: its {len(named)} ops are replayed together.")
    spec = ReproSpec(
        ops=named, input_names=list(inputs), backend=backend, local_modules=local_modules,
        fallback_random=fallback_random, rtol=rtol, atol=atol,
        title=f"{first.site.op} at {first.site.source}", context=context, comments=comments, returns=returns,
    )
    return spec, inputs


def _tolerance(first: Divergence, record: TraceRecord, config: Config) -> tuple[float, float]:
    """The tolerance the divergence was judged by (the report says), else the config's for the output."""
    if first.tensor is not None:
        return float(first.tensor.rtol), float(first.tensor.atol)
    out = (record.get("out") or [{}])[0]
    tolerance = config.tolerance_for(out.get("dt", "float32"), record["op"], record.get("m"), out.get("dev", "cpu"))
    return tolerance.rtol, tolerance.atol


def copy_local_modules(divergence: Recorded, out_dir: Path) -> list[str]:
    """Copy the script's own modules (as the compiled run imported them) beside the repro; their names."""
    names: list[str] = []
    for trace_path, header in ((divergence.trace_b, divergence.header_b), (divergence.trace_a, divergence.header_a)):
        script_dir = Path(header.get("cwd") or ".") / Path((header.get("command") or ["."])[0]).parent
        for module in (read_footer(trace_path) or {}).get("local_modules") or []:
            source = script_dir / module["file"]
            if module["name"] in names or not source.is_file():
                continue
            target = out_dir / module["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            names.append(module["name"])
    return names


def check_repro(out_dir: Path, timeout: float, echo: Callable[[str], None]) -> dict[str, Any]:
    """Run the written repro as a user would: with its backend, then the eager control."""
    echo(f"tracediff: checking the repro: python {SCRIPT_NAME} (in {out_dir})")
    main = _run_repro(out_dir, [], timeout)
    for line in main["output"].splitlines()[-12:]:
        echo(f"[repro] {line}")
    control = _run_repro(out_dir, ["--backend", "eager"], timeout)
    echo(f"tracediff: control: python {SCRIPT_NAME} --backend eager -> exit {control['returncode']}")
    failure = main["failure"] or control["failure"]
    if failure is None and control["returncode"] != 0:
        failure = "the eager control disagrees with itself: the replayed ops are nondeterministic"
    return {"returncode": main["returncode"], "output": main["output"], "control_returncode": control["returncode"],
            "failure": failure}


def _run_repro(out_dir: Path, options: list[str], timeout: float) -> dict[str, Any]:
    try:
        done = subprocess.run([sys.executable, SCRIPT_NAME, *options], cwd=out_dir, capture_output=True, text=True,
                              timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return {"returncode": None, "output": "", "failure": f"the repro did not finish within {timeout:.0f} s"}
    output = (done.stdout + done.stderr).strip()
    failure = None if done.returncode in (0, 1) else (  # 3: it raised
        f"{' '.join(['python', SCRIPT_NAME, *options])} exited with status {done.returncode}: "
        + (output.splitlines()[-1] if output else "no output"))
    return {"returncode": done.returncode, "output": output[-4000:], "failure": failure}


def write_repro(paths: list[str], config: Config, out_dir: str | None, backend: str | None, check: bool,
                echo: Callable[[str], None]) -> dict[str, Any]:
    """The whole `tracediff repro`: returns a result dict with `exit_code` and `message`."""
    if out_dir:
        ensure_dir(out_dir, "--out-dir")  # before the re-run: a path that cannot be written fails in a second
    divergence = load_divergence(paths, config)
    outcome = divergence.outcome
    if outcome.verdict is Verdict.MATCH:
        return _outcome("match", ExitCode.MATCH, "no divergence between the two runs: nothing to reproduce")
    if outcome.verdict is Verdict.FAILED or outcome.first_divergence is None:
        reasons = [r.failure for r in outcome.runs if r.failure]
        return _outcome("failed", ExitCode.RUN_FAILED,
                        "a run failed, so there is no divergence to reproduce: " + (reasons[0] if reasons else "see the report"))

    records = ops_to_replay(divergence)
    backend = backend or divergence.header_b.get("backend")
    if not backend or backend == "as-written":
        raise UserError("the compared trace does not name its backend (recorded as written): pass --backend")
    target = ensure_dir(Path(out_dir) if out_dir else (divergence.run_dir or Path(".tracediff")) / "repro",
                        "--out-dir" if out_dir else "repro directory")
    with tempfile.TemporaryDirectory(prefix="tracediff-repro-") as work:
        try:
            ops, notes = capture_arguments(divergence, records, config, Path(work), echo)
        except ReproRunFailed as e:
            return _outcome("failed", ExitCode.RUN_FAILED, str(e))
        except KeyboardInterrupt:  # the re-run's partial trace is in `work`, about to be removed
            raise Interrupted(f"nothing was written to {target}: the re-run capturing the inputs was stopped") from None
    local_modules = copy_local_modules(divergence, target)
    spec, inputs = build_spec(divergence, records, ops, backend, local_modules, config)
    (target / SCRIPT_NAME).write_text(render_script(spec), encoding="utf-8")
    torch.save({str(name): t for name, t in inputs.items()}, target / INPUTS_NAME)  # plain keys: loads without tracediff
    echo(f"tracediff: wrote {target / SCRIPT_NAME} and {target / INPUTS_NAME}")

    result = _outcome("written", ExitCode.DIVERGED, "")
    result.update(
        repro_dir=str(target), script=str(target / SCRIPT_NAME), inputs=str(target / INPUTS_NAME),
        backend=backend, local_modules=local_modules, notes=notes, check=None,
        ops=[{"index": r["i"], "op": r["op"], "source": r.get("src")} for r in records],
        first_divergence=outcome.first_divergence.to_json(),
    )
    if check:
        with interrupt_keeps(f"the repro is written, in {target}; its check was stopped"):
            result["check"] = checked = check_repro(target, config.timeout, echo)
        if checked["failure"]:
            result.update(verdict="failed", exit_code=int(ExitCode.RUN_FAILED))
        elif checked["returncode"] == 0:
            result.update(verdict="not_reproduced", exit_code=int(ExitCode.MATCH))
            result["notes"].append("the repro does not reproduce on its own: the divergence needs more of the "
                                   "program than these ops (e.g. fusion with ops outside the kernel, or state)")
        else:
            result["verdict"] = "reproduced"
    return result


def _outcome(verdict: str, code: ExitCode, message: str) -> dict[str, Any]:
    return {"verdict": verdict, "exit_code": int(code), "message": message}


def render_result(result: dict[str, Any]) -> str:
    """The text `tracediff repro` prints on stdout."""
    if "script" not in result:
        return f"{result['message']}\n"
    ops = result["ops"]
    what = (f"{ops[0]['op']} at {ops[0]['source']}" if len(ops) == 1
            else f"{len(ops)} fused ops ending with {ops[-1]['op']} at {ops[-1]['source']}")
    lines = [f"repro for {what}, backend {result['backend']}:",
             f"  python {shlex.quote(result['script'])}",  # pasted into a shell: a path with spaces must stay one word
             f"  inputs: {result['inputs']}"]
    if result["local_modules"]:
        lines.append(f"  with the script's own modules copied beside it: {', '.join(result['local_modules'])}")
    verdict = {"reproduced": "it reproduces on its own (exit 1); `--backend eager` agrees",
               "not_reproduced": "it does NOT reproduce on its own (exit 0)",
               "failed": f"it failed to run: {(result.get('check') or {}).get('failure')}",
               "written": "not run (--no-check)"}[result["verdict"]]
    lines.append(f"  {verdict}")
    lines += [f"  note: {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"
