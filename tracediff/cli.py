"""Command line: parse, call one core function, map its result to an exit code.

No numerics here. A `UserError` becomes one line on stderr and exit 2; any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tracediff.errors import ExitCode, Interrupted, UserError

_FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
                       help="text for people, json (one object on stdout) for programs")


def _tolerance_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed([
        click.option("--rtol", type=float, help="relative tolerance for every float dtype (overrides the defaults)"),
        click.option("--atol", type=float, help="absolute tolerance per element for every float dtype"),
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="tracediff.yaml with tolerances, per-op/module overrides, ignores [default: ./tracediff.yaml]"),
        click.option("--strict-structure", is_flag=True, default=None,
                     help="fail on records present in one run only, not just on value differences"),
        click.option("--exact", is_flag=True, default=None, help="bitwise comparison (records content hashes)"),
    ]):
        f = option(f)
    return f


def _run_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Options of the commands that run the script: where output goes, limits, seed."""
    for option in reversed([
        click.option("--out-dir", type=click.Path(file_okay=False),
                     help="where traces and report go [default: .tracediff/<time>/]"),
        click.option("--timeout", type=float, default=None, help="seconds per run before it is killed [default: 900]"),
        click.option("--seed", type=int, default=None, help="seed for torch, random and numpy in every run [default: 0]"),
        click.option("--compress/--no-compress", default=None,
                     help="write the run directory's traces zstd-compressed (a-eager.jsonl.zst), about 7x smaller; "
                          "every command reads them as plain ones [default: off, or tracediff.yaml's compress]"),
    ]):
        f = option(f)
    return f


def _report_file_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--html and --junit: extra report files, written besides the normal output."""
    for option in reversed([
        click.option("--html", "html_path", type=click.Path(dir_okay=False),
                     help="also write a self-contained HTML report (aligned traces, divergence, rel-diff plot)"),
        click.option("--junit", "junit_path", type=click.Path(dir_okay=False),
                     help="also write JUnit XML for CI (a failure on divergence, an error when a run failed)"),
    ]):
        f = option(f)
    return f


def _node_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """A job on several nodes: torch.distributed.run's own options, passed on to it on each node."""
    for option in reversed([
        click.option("--nnodes", default=None, metavar="N|MIN:MAX",
                     help="nodes of the job: each node runs this same command with its --node-rank, and records "
                          "its own ranks (traces named by global rank); needs --rdzv-endpoint"),
        click.option("--node-rank", type=click.IntRange(min=0), default=None,
                     help="this node's number, 0 to N-1 (e.g. $SLURM_NODEID); with --nnodes"),
        click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                     help="where the nodes meet: a host:port every node reaches (e.g. the first node's)"),
        click.option("--rdzv-backend", default=None,
                     help="torchrun's rendezvous: static (its default; node N runs ranks N*nproc...) or c10d "
                          "(a range of nodes; it numbers the nodes itself)"),
        click.option("--rdzv-id", default=None, help="a name of the job, the same on every node [default: none]"),
    ]):
        f = option(f)
    return f


def _echo_err(line: str) -> None:
    click.echo(line, err=True)


def _emit(report: dict[str, Any], fmt: str) -> int:
    from tracediff.report.text import render_text

    if fmt == "json":
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(render_text(report), nl=False)
    return int(report["exit_code"])


def _load_config(config_path: str | None, **overrides: Any) -> Any:
    from tracediff.config import load_config

    return load_config(config_path).with_overrides(**overrides)


class _Group(click.Group):
    """A UserError or usage error from any command: one line on stderr and exit code 2. Ctrl-C: one line
    naming what was kept and exit code 130 (click alone would say "Aborted!" and exit 1, "divergence")."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as e:
            click.echo(f"tracediff: error: {e}", err=True)
            ctx.exit(ExitCode.USAGE)
        except click.UsageError as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # click 8.2+: prints the help, as asked
                raise
            hint = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
            click.echo(f"tracediff: error: {e.format_message()}{hint}", err=True)
            ctx.exit(ExitCode.USAGE)
        except KeyboardInterrupt as e:
            kept = f"; {e.kept}" if isinstance(e, Interrupted) else ""
            click.echo(f"tracediff: interrupted{kept}", err=True)
            ctx.exit(ExitCode.INTERRUPTED)


class _ScriptCommand(click.Command):
    """A command that runs SCRIPT: tracediff's options anywhere before `--`, the script's arguments after it.

    Anything else before `--` (an unknown option, a second argument) stops with exit 2 and says where it
    goes, instead of being handed to the script silently: `run train.py --out x` would otherwise pass
    `--out x` to train.py and write the run somewhere else. The script's arguments reach the callback
    as `script_args`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", {})["allow_extra_args"] = True
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        own, script_args = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
        where = f"arguments for the script go after --: tracediff {self.name} SCRIPT [OPTIONS] -- ARGS"
        try:
            rest = super().parse_args(ctx, own)
        except click.NoSuchOption as e:
            hint = f" (did you mean {', '.join(e.possibilities)}?)" if e.possibilities else ""
            raise UserError(f"{e.option_name} is not an option of tracediff {self.name}{hint}; {where}") from None
        if ctx.args:
            raise UserError(f"unexpected argument {' '.join(ctx.args)!r} after the script; {where}")
        ctx.params["script_args"] = tuple(script_args)
        return rest

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- SCRIPT_ARGS...]"]


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracediff")
def cli() -> None:
    """Find the first op whose numbers change between two PyTorch runs.

    \b
      tracediff run train.py --backends eager,inductor
      tracediff record train.py -o run.jsonl
      tracediff diff golden.jsonl run.jsonl
      tracediff show run.jsonl --module encoder.layer.3
      tracediff nan run.jsonl
      tracediff bisect train.py --backend inductor
      tracediff repro .tracediff/20261122-101500/

    \b
    Options go before --, the script's own arguments after it:
      tracediff run train.py --backends eager,aot_eager -- --steps 2

    Exit codes: 0 no divergence, 1 divergence, 2 bad usage, input or output
    path, 3 a run failed, 130 interrupted (Ctrl-C; the partial traces are kept).
    """
    from tracediff.quiet import silence_missing_numpy

    silence_missing_numpy()


@cli.command(cls=_ScriptCommand)
@click.argument("script", type=click.Path())
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="trace.jsonl", show_default=True,
              help="trace file to write (.jsonl; .jsonl.zst or .jsonl.gz: compressed)")
@click.option("--backend", default=None, help="redirect the script's torch.compile to this backend [default: as written]")
@click.option("--seed", type=int, default=None, help="seed for torch, random and numpy [default: 0, or the config's]")
@click.option("--exact", is_flag=True, default=None, help="also record a bitwise hash of every tensor")
@click.option("--timeout", type=float, default=None, help="seconds before the run is killed [default: 900]")
@click.option("--float64", is_flag=True, help="compute every floating op in float64: a noise reference for diff --noise")
@click.option("--same-inputs", is_flag=True,
              help="judge each compiled call on its own inputs against the uncompiled graph and float64, as `run` "
                   "judges its candidate: `diff` then tells a compiler's error from drift a training run amplified "
                   "(needs a compiling --backend; each call runs again uncompiled)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="tracediff.yaml whose seed, exact, fallback_random and timeout apply [default: ./tracediff.yaml]")
@click.option("--nproc-per-node", "nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="processes to launch with torch's elastic launcher (torchrun); each writes its rank's trace")
@_node_options
def record(script: str, script_args: tuple[str, ...], output: str, backend: str | None, seed: int | None,
           exact: bool | None, timeout: float | None, float64: bool, same_inputs: bool, config_path: str | None,
           nproc: int, nnodes: str | None, node_rank: int | None, rdzv_endpoint: str | None,
           rdzv_backend: str | None, rdzv_id: str | None) -> None:
    """Run SCRIPT under the recorder and write one trace.

    Options go before --, the script's own arguments after it. Inside a rank
    another launcher started (torchrun, or srun with RANK and WORLD_SIZE set
    from SLURM_PROCID and SLURM_NTASKS), each rank writes its own trace, its
    global rank in the name, without launching anything.

    \b
      tracediff record train.py -o run.jsonl -- --steps 2
      tracediff record train.py --backend eager --float64 -o noise.jsonl
      tracediff record train.py --backend inductor --same-inputs -o compiled.jsonl   # a training run
      tracediff record ddp_train.py --nproc-per-node 2 -o run.jsonl   # run.rank0.jsonl, run.rank1.jsonl
      torchrun --nproc-per-node 2 -m tracediff.cli record ddp_train.py -o run.jsonl   # the same two traces
    \b
    Two nodes (on each, its --node-rank; the traces are named by global rank):
      tracediff record ddp_train.py --nnodes 2 --node-rank 0 --nproc-per-node 2 \\
          --rdzv-endpoint node0:29400 -o /shared/run.jsonl
      tracediff diff /shared/golden.jsonl /shared/run.jsonl   # once every node is done
    """
    from tracediff.launch.nodes import nodes_of
    from tracediff.run.pipeline import record_script

    nodes = nodes_of(nnodes, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id)
    config = _load_config(config_path, seed=seed, exact=exact, timeout=timeout)
    result = record_script(script, list(script_args), backend, config, Path(output), float64, _echo_err, nproc,
                           nodes, judge=same_inputs)
    written = ", ".join(map(str, result.rank_traces or (result.trace,)))
    failure = result.failure()
    if failure:
        _echo_err(f"tracediff: {failure}; the trace up to that point is in {written}")
        sys.exit(ExitCode.USAGE if result.returncode == ExitCode.USAGE else ExitCode.RUN_FAILED)
    _echo_err(f"tracediff: wrote {written}")
    if nodes is not None:
        _echo_err(f"tracediff: node {nodes.node_rank} ran rank(s) {', '.join(map(str, result.ranks))} of "
                  f"{result.world_size}; once every node is done, `tracediff diff` takes the whole job from one "
                  f"directory holding every node's traces")


@cli.command()
@click.argument("trace", type=click.Path())
@click.option("--op", help="only ops whose name contains this, e.g. cos or aten::addmm")
@click.option("--module", help="only ops in this module or below, e.g. Net.block")
@click.option("--range", "index_range", help="only records with index in START:END (END exclusive), or one INDEX")
@click.option("--nan", "nan_only", is_flag=True,
              help="only ops whose outputs hold NaN or Inf (`tracediff nan` names the first op that made them)")
@click.option("--limit", type=int, default=None, help="stop after this many lines")
def show(trace: str, op: str | None, module: str | None, index_range: str | None, nan_only: bool,
         limit: int | None) -> None:
    """Print a recording as a readable listing, grouped by module and source line.

    \b
      tracediff show run.jsonl --module encoder.layer.3
      tracediff show run.jsonl --nan
    """
    from tracediff.report.listing import ListingFilter, parse_range, render_listing
    from tracediff.trace.reader import Trace

    flt = ListingFilter(op=op, module=module, index_range=parse_range(index_range) if index_range else None,
                        nan_only=nan_only)
    opened = Trace(trace)
    for line in render_listing(opened, flt, max_lines=limit):
        click.echo(line)
    if opened.truncated:
        sys.exit(ExitCode.USAGE)


@cli.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@_FORMAT
def nan(traces: tuple[str, ...], fmt: str) -> None:
    """Name the first op that makes NaN or Inf from finite inputs, with source line and module.

    One trace, or two (e.g. the eager and compiled runs of `tracediff run`).
    Exit 1 when a trace holds NaN/Inf, 0 when none does.

    \b
      tracediff nan run.jsonl
      tracediff nan .tracediff/<run>/a-eager.jsonl .tracediff/<run>/b-inductor.jsonl
    """
    from tracediff.report.nan import nan_report, render_nan

    if len(traces) > 2:
        raise UserError(f"tracediff nan takes one or two traces, got {len(traces)}")
    report = nan_report(traces)
    click.echo(json.dumps(report, indent=2) if fmt == "json" else render_nan(report), nl=fmt == "json")
    sys.exit(report["exit_code"])


@cli.command(cls=_ScriptCommand)
@click.argument("script", type=click.Path())
@click.option("--backends", default="eager,inductor", show_default=True,
              help="reference,candidate: eager, dynamo, aot_eager, inductor, ... or pkg.module:attr; "
                   "one name (or the same twice): a determinism check")
@click.option("--repeat", type=int, default=None,
              help="record each backend N times and compare run 1 with every other run [default: 2 for one backend]")
@_run_options
@click.option("--fallback-random/--no-fallback-random", default=None,
              help="inductor calls eager's RNG so random ops agree [default: on for inductor]")
@click.option("--narrow/--no-narrow", default=True, show_default=True,
              help="inductor: when the divergence is inside a fused kernel, re-run with one kernel per op to pin it")
@click.option("--calibrate", is_flag=True,
              help="also record the reference with float64 math and judge each difference against the "
                   "reference's own error there (noise_factor x noise, at least the tolerance)")
@click.option("--same-inputs/--no-same-inputs", default=None,
              help="judge each compiled call of the candidate on its own inputs against the uncompiled graph and "
                   "float64; the verdict is that judgement's, and a difference between the runs is drift "
                   "[default: on]")
@click.option("--light", is_flag=True, default=None,
              help="for long runs: record only the compiled calls, not every op, and judge them on their own "
                   "inputs within a time budget; the ops around the first wrong call are then recorded in depth")
@click.option("--nproc-per-node", "nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="launch each backend on N ranks with torch's launcher (torchrun), compare rank by rank, "
                   "and check that replicas stay identical across ranks; one backend: that check alone")
@_node_options
@_tolerance_options
@_FORMAT
@_report_file_options
def run(script: str, script_args: tuple[str, ...], backends: str, repeat: int | None, out_dir: str | None,
        timeout: float | None, seed: int | None, compress: bool | None, fallback_random: bool | None, narrow: bool, calibrate: bool,
        same_inputs: bool | None, light: bool | None, nproc: int, nnodes: str | None, node_rank: int | None,
        rdzv_endpoint: str | None, rdzv_backend: str | None, rdzv_id: str | None, rtol: float | None,
        atol: float | None, config_path: str | None, strict_structure: bool | None, exact: bool | None, fmt: str,
        html_path: str | None, junit_path: str | None) -> None:
    """Run SCRIPT under two backends, diff the recordings, report the first divergence.

    Options go before --, the script's own arguments after it. Exit 1 on
    divergence, so it gates CI; 3 when a run fails, 130 on Ctrl-C.

    \b
      tracediff run train.py --backends eager,inductor
      tracediff run train.py --backends eager,aot_eager --format json -- --steps 2
      tracediff run train.py --backends inductor --repeat 3     # is inductor deterministic?
      tracediff run train.py --html report.html --junit junit.xml
      tracediff run ddp_train.py --backends eager,inductor --nproc-per-node 2
      tracediff run ddp_train.py --backends inductor --nproc-per-node 2   # do my ranks stay in sync?
      tracediff run train.py --light -- --steps 5000     # a long run: compiled calls judged, no op recorded
    \b
    Two nodes (on each, its --node-rank): each records A and B on its own ranks
    and compares those; `tracediff diff` compares the whole job afterwards:
      tracediff run ddp_train.py --backends eager,inductor --nnodes 2 --node-rank 0 \\
          --nproc-per-node 2 --rdzv-endpoint node0:29400 --out-dir /shared/run1
      tracediff diff /shared/run1/a-eager.jsonl /shared/run1/b-inductor.jsonl
    """
    from tracediff.diff.sample import AlignmentSample
    from tracediff.launch.nodes import nodes_of
    from tracediff.report.files import check_output_path, write_report_files
    from tracediff.run.entry import is_single_comparison, run_script

    nodes = nodes_of(nnodes, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id)
    html, junit = check_output_path(html_path, "--html"), check_output_path(junit_path, "--junit")
    config = _load_config(config_path, rtol=rtol, atol=atol, strict_structure=strict_structure, exact=exact,
                          timeout=timeout, seed=seed, fallback_random=fallback_random, same_inputs=same_inputs,
                          light=light, compress=compress)
    single = nproc == 1 and nodes is None and is_single_comparison(backends, repeat)
    sample = AlignmentSample() if html and single else None
    outcome = run_script(script, list(script_args), backends, config, out_dir, _echo_err, repeat=repeat,
                         calibrate=calibrate, narrow_fused=narrow, sample=sample, nproc=nproc, nodes=nodes)
    report = outcome.to_json()  # the renderers read the JSON contract
    _echo_err(f"tracediff: traces and report in {report['run_dir']}")
    write_report_files(report, sample, html, junit, _echo_err)
    sys.exit(_emit(report, fmt))


@cli.command(cls=_ScriptCommand)
@click.argument("script", type=click.Path())
@click.option("--backend", default="inductor", show_default=True,
              help="the compile backend whose numbers differ from eager")
@_run_options
@_tolerance_options
@_FORMAT
def bisect(script: str, script_args: tuple[str, ...], backend: str, out_dir: str | None, timeout: float | None,
           seed: int | None, compress: bool | None, rtol: float | None, atol: float | None, config_path: str | None,
           strict_structure: bool | None, exact: bool | None, fmt: str) -> None:
    """Find the compiler stage that changes SCRIPT's numbers, with torch's CompilerBisector.

    Runs eager and BACKEND, and if they diverge, re-runs the script once per
    bisection step (backend, then subsystem: decompositions, graph passes,
    lowerings, config flips, then the single application) with tracediff's
    verdict as the oracle. Exit 1 when a divergence was bisected, 0 when
    there is nothing to bisect, 3 when a run fails. BACKEND is one of torch's
    own (a custom module:attr backend cannot be bisected: exit 2 at once).
    Options go before --, the script's own arguments after it.

    \b
      tracediff bisect train.py --backend inductor
      tracediff bisect train.py --backend inductor --format json -- --steps 2
    """
    from tracediff.bisect.compiler import check_bisectable
    from tracediff.run.pipeline import bisect_script, parse_backends

    check_bisectable(backend)
    parse_backends(f"eager,{backend}", script)
    config = _load_config(config_path, rtol=rtol, atol=atol, strict_structure=strict_structure, exact=exact,
                          timeout=timeout, seed=seed, compress=compress)
    report = bisect_script(script, list(script_args), backend, config, out_dir, _echo_err).to_json()
    _echo_err(f"tracediff: traces and report in {report['run_dir']}")
    sys.exit(_emit(report, fmt))


@cli.command(cls=_ScriptCommand)
@click.argument("script", type=click.Path())
@click.option("--backend", default="inductor", show_default=True,
              help="the compile backend whose numbers differ from eager")
@click.option("--max-runs", type=click.IntRange(min=1), default=8, show_default=True,
              help="recorded runs of the script to spend on changes (the diagnosis and timing runs not counted)")
@_run_options
@_tolerance_options
@_FORMAT
def fix(script: str, script_args: tuple[str, ...], backend: str, max_runs: int, out_dir: str | None,
        timeout: float | None, seed: int | None, compress: bool | None, rtol: float | None, atol: float | None, config_path: str | None,
        strict_structure: bool | None, exact: bool | None, fmt: str) -> None:
    """Find the cheapest change to the compile that makes SCRIPT's numbers match eager again.

    Runs eager and BACKEND as `run` does; if they diverge, tries changes a user
    can make in their own code, most local first (the script's own
    decomposition, lowering or graph pass for the op found; precision casts;
    full-precision matmuls; its module in float32 under autocast; no fusion
    around the op; compile disabled on its module; nothing compiled), each verified by a recorded run that must match
    eager within the same tolerance, then times each. Prints the
    fastest as lines of Python to paste. Exit 0 when a change works (or there
    is nothing to fix), 1 when none does, 3 when a run fails. --timeout bounds
    each run and the whole search.

    \b
      tracediff fix train.py --backend inductor
      tracediff fix train.py --backend inductor --max-runs 4 --format json -- --steps 2
    """
    from tracediff.fix.render import render_fix
    from tracediff.fix.search import fix_script
    from tracediff.run.pipeline import parse_backends

    parse_backends(f"eager,{backend}", script)
    if backend == "eager":
        raise UserError("fix: --backend must be a compile backend (inductor, aot_eager, ...), not eager")
    config = _load_config(config_path, rtol=rtol, atol=atol, strict_structure=strict_structure, exact=exact,
                          timeout=timeout, seed=seed, compress=compress)
    result = fix_script(script, list(script_args), backend, config, out_dir, _echo_err, max_runs=max_runs,
                        timeout=timeout)
    report = result.to_json()
    _echo_err(f"tracediff: traces and report in {report['run_dir']}")
    if fmt == "json":
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(render_fix(report), nl=False)
    sys.exit(result.exit_code)


@cli.command()
@click.argument("trace_a", type=click.Path())
@click.argument("trace_b", type=click.Path())
@click.option("--noise", "noise_trace", type=click.Path(dir_okay=False),
              help="a float64 recording of A (`tracediff record --float64`): judge differences against A's noise")
@_tolerance_options
@_FORMAT
@_report_file_options
def diff(trace_a: str, trace_b: str, noise_trace: str | None, rtol: float | None, atol: float | None,
         config_path: str | None, strict_structure: bool | None, exact: bool | None, fmt: str,
         html_path: str | None, junit_path: str | None) -> None:
    """Compare two recordings: A is the reference (e.g. a golden trace), B the run under test.

    \b
      tracediff diff golden.jsonl run.jsonl --format json
      tracediff diff golden.jsonl run.jsonl --html report.html --junit junit.xml
      tracediff diff golden.jsonl run.jsonl --noise golden-float64.jsonl
    """
    from tracediff.diff.sample import AlignmentSample
    from tracediff.report.files import check_output_path, write_report_files
    from tracediff.run.entry import diff_recordings

    html, junit = check_output_path(html_path, "--html"), check_output_path(junit_path, "--junit")
    config = _load_config(config_path, rtol=rtol, atol=atol, strict_structure=strict_structure, exact=exact)
    sample = AlignmentSample() if html else None
    report = diff_recordings(trace_a, trace_b, config, noise_trace, sample,
                             progress=lambda line: _echo_err(f"tracediff: {line}")).to_json()
    write_report_files(report, sample, html, junit, _echo_err)
    sys.exit(_emit(report, fmt))


@cli.command()
@click.argument("run", nargs=-1, required=True, type=click.Path())
@click.option("--out-dir", type=click.Path(file_okay=False),
              help="where repro.py and inputs.pt go [default: RUN/repro/, or .tracediff/repro/ for two traces]")
@click.option("--backend", default=None,
              help="backend the repro compiles with [default: the compared run's, e.g. inductor]")
@click.option("--check/--no-check", default=True, show_default=True,
              help="run the written repro once to see whether it reproduces on its own")
@click.option("--timeout", type=float, default=None, help="seconds for the re-run and the check [default: 900]")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="tracediff.yaml, for the tolerance of the re-run check [default: ./tracediff.yaml]")
@_FORMAT
def repro(run: tuple[str, ...], out_dir: str | None, backend: str | None, check: bool, timeout: float | None,
          config_path: str | None, fmt: str) -> None:
    """Write a standalone script that reproduces the first divergence of RUN.

    RUN is a folder written by `tracediff run` (or two traces, reference
    first). The reference script is re-run once to capture the inputs of the
    divergent op (or of the fused kernel's ops); the repro runs just those ops
    in eager and under the backend, prints both results and their difference,
    and exits 1 while they differ. It needs only torch, not tracediff.

    Exit 1 when the repro reproduces (or was not checked), 0 when it does not
    reproduce on its own or the runs match, 3 when a run fails.

    \b
      tracediff repro .tracediff/20261122-101500/
      tracediff repro golden.jsonl run.jsonl --out-dir bug/ --no-check
      python bug/repro.py --backend eager      # the control: agrees
    """
    from tracediff.repro.writer import render_result, write_repro

    config = _load_config(config_path, timeout=timeout)
    result = write_repro(list(run), config, out_dir, backend, check, _echo_err)
    if "script" not in result:
        click.echo(f"tracediff: {result['message']}", err=True)
    if fmt == "json":
        click.echo(json.dumps(result, indent=2, default=str))
    elif "script" in result:
        click.echo(render_result(result), nl=False)
    sys.exit(result["exit_code"])


def main() -> None:
    """Console entry point. `kill` (a cancelled CI job) stops a run as Ctrl-C does: the processes it
    started are stopped too, not left running, and what was recorded is kept."""
    signal.signal(signal.SIGTERM, _interrupt)
    cli()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
