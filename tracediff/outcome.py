"""The result types: what a recorded run came to (`RunResult`), and what a comparison decided
(`Outcome`, with `to_json`/`from_json` for the report's JSON contract).

Types only: every stage above (the launcher that makes a `RunResult`, the verdict and the
stages after it, the renderers) imports this module, and it imports nothing of tracediff's
but the exit codes.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from tracediff.errors import ExitCode


@dataclass(frozen=True)
class RunResult:
    backend: str | None
    trace: Path
    log: Path
    returncode: int
    timed_out: bool
    elapsed_s: float
    error: dict[str, Any] | None = None  # the trace footer's `error`: what the script raised, if it did
    output_tail: tuple[str, ...] = ()  # the last lines the script printed (stdout and stderr, as relayed)
    # Launched on several processes (torch's elastic launcher): each rank's trace, the first rank whose
    # script raised, and how far every rank got ("rank 1: 98 records, cut off"), for a failed run.
    rank_traces: tuple[Path, ...] = ()
    failed_rank: int | None = None
    rank_progress: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def failure(self) -> str | None:
        """One line on why this run failed, or None."""
        if self.timed_out:
            progress = f" ({', '.join(self.rank_progress)})" if self.rank_progress else ""
            return f"run with backend {self.backend} timed out after {self.elapsed_s:.0f} s{progress}"
        if self.returncode == ExitCode.RUN_FAILED:
            rank = "" if self.failed_rank is None else f"rank {self.failed_rank}: "
            progress = f"; {', '.join(self.rank_progress)}" if self.rank_progress else ""
            return (f"under backend {self.backend}, {rank}{_script_outcome(self.error, self.output_tail)}"
                    f"{progress} (see {self.log})")
        if self.returncode == ExitCode.USAGE:
            return _last_line(self.log)
        if self.returncode < 0:
            return f"run with backend {self.backend} was killed by {_signal_text(-self.returncode)} (see {self.log})"
        if self.returncode != 0:
            return f"run with backend {self.backend} exited with status {self.returncode} (see {self.log})"
        return None


def _script_outcome(error: dict[str, Any] | None, tail: tuple[str, ...]) -> str:
    """`the script raised ValueError: bad shape` or `the script exited with status 2: <its last line>`."""
    if error is None:
        return "the script failed" + (f": {tail[-1]}" if tail else "")
    message = str(error.get("message") or "")
    if error.get("type") == "SystemExit":
        # sys.exit(N), or sys.exit("text"): Python prints the text and exits with status 1
        status, text = (message, tail[-1] if tail else "") if message.lstrip("-").isdigit() else ("1", message)
        return f"the script exited with status {status}" + (f": {text}" if text else "")
    return f"the script raised {error.get('type')}" + (f": {message}" if message else "")


def _signal_text(number: int) -> str:
    """`signal SIGSEGV (11): a crash in native code`."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    why = {"SIGSEGV": "a crash in native code", "SIGBUS": "a crash in native code", "SIGILL": "a crash in native code",
           "SIGABRT": "aborted, e.g. a failed assertion in native code",
           "SIGKILL": "killed from outside, e.g. out of memory"}.get(name)
    return f"signal {name} ({number})" + (f": {why}" if why else "")


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "failed"
    return lines[-1].removeprefix("tracediff: ") if lines else "failed"


# -- the outcome of a comparison: what `tracediff run`/`diff` decided, and the JSON contract it writes --------


class Verdict(str, Enum):
    MATCH = "match"
    DIVERGED = "diverged"
    FAILED = "failed"

    @property
    def exit_code(self) -> ExitCode:
        return {Verdict.MATCH: ExitCode.MATCH, Verdict.DIVERGED: ExitCode.DIVERGED,
                Verdict.FAILED: ExitCode.RUN_FAILED}[self]


class Cause(str, Enum):
    """What the first divergence is. The JSON's `kind` says output, nan or structure; a program input
    that differs before any op ran, and a value computed from uninitialized memory (`torch.empty`), are
    output differences there, told apart here for the advice."""

    OUTPUT = "output"
    NAN = "nan"
    STRUCTURE = "structure"
    PROGRAM_INPUT = "program input"
    UNINITIALIZED_MEMORY = "uninitialized memory"

    @property
    def kind(self) -> str:
        return "output" if self in (Cause.PROGRAM_INPUT, Cause.UNINITIALIZED_MEMORY) else self.value


@dataclass(frozen=True)
class Site:
    """An op (or kernel, or region) of a trace, as the report names it."""

    op: str | None
    index: int | None
    source: str | None
    module: str | None
    code: str | None

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "index": self.index, "source": self.source, "module": self.module, "code": self.code}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Site:
        return cls(d.get("op"), d.get("index"), d.get("source"), d.get("module"), d.get("code"))


@dataclass(frozen=True)
class TensorEvidence:
    """The worst differing tensor of the first divergence, with both fingerprints and the judgement."""

    side: str  # "input" | "output"
    arg: str
    dtype: str
    shape: tuple[int, ...]
    fingerprint_a: Mapping[str, Any]  # trace/schema.py's Fingerprint (this module imports no other layer's types)
    fingerprint_b: Mapping[str, Any]
    rel_diff: float | None  # None: not finite (JSON has no Infinity)
    statistic: str
    rtol: float
    atol: float
    comparison: str  # the judgement in words
    noise: float | None
    above_noise: float | None

    def to_json(self) -> dict[str, Any]:
        return {"side": self.side, "arg": self.arg, "dtype": self.dtype, "shape": list(self.shape),
                "fingerprint_a": self.fingerprint_a, "fingerprint_b": self.fingerprint_b, "rel_diff": self.rel_diff,
                "statistic": self.statistic, "tolerance": {"rtol": self.rtol, "atol": self.atol},
                "comparison": self.comparison, "noise": self.noise, "above_noise": self.above_noise}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TensorEvidence:
        return cls(d["side"], d["arg"], d["dtype"], tuple(d["shape"]), d["fingerprint_a"], d["fingerprint_b"],
                   d.get("rel_diff"), d.get("statistic", ""), d["tolerance"]["rtol"], d["tolerance"]["atol"],
                   d.get("comparison", ""), d.get("noise"), d.get("above_noise"))


@dataclass(frozen=True)
class Divergence:
    """The first divergence: the op named (its `site`), the other candidates, and the evidence."""

    cause: Cause
    site: Site
    rel_diff: float | None
    candidates: tuple[Site, ...]
    pinned_by: str | None  # "same_inputs" | "value" | "position" | None (not pinned)
    path: str | None  # the named op's file
    inputs_agree: bool
    may_start_earlier: bool
    note: str
    observed: Site | None  # where the difference showed, if not at the op named
    b: Site | None  # B's record there
    tensor: TensorEvidence | None
    narrowing: dict[str, Any] | None = None  # the re-run with one kernel per op (run/narrow.py)
    # A distributed run: the rank whose trace `site` is in, and how the difference came there: "local"
    # (made on that rank) or "collective" (a collective's result, made elsewhere).
    rank: int | None = None
    entered: str | None = None
    # A same-input verdict (diff/same_inputs.py): the call's worst output, {"output", "dtype", "kind", "why"};
    # kind "wrong" (further from float64 than eager) or "precision" (the more precise, grossly changed).
    judged: dict[str, Any] | None = None
    # The name of the rule that placed it (docs/design.md §7): a trace rule (diff/verdict/), or
    # "wrong_on_its_own_inputs" / "compiled_call_wrong_on_its_own_inputs" (diff/same_inputs.py), or
    # "replicas_part" (diff/rank_verdict.py). A wrong verdict points at the rule to mend.
    rule: str = field(kw_only=True)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.cause.kind, "op": self.site.op, "index": self.site.index, "source": self.site.source,
               "module": self.site.module, "rel_diff": self.rel_diff,
               "candidates": [c.to_json() for c in self.candidates], "pinned_by": self.pinned_by,
               "code": self.site.code, "path": self.path, "inputs_agree": self.inputs_agree,
               "may_start_earlier": self.may_start_earlier, "note": self.note,
               "observed": self.observed.to_json() if self.observed else None,
               "b": self.b.to_json() if self.b else None, "tensor": self.tensor.to_json() if self.tensor else None,
               "rule": self.rule}
        if self.narrowing is not None:
            out["narrowing"] = self.narrowing
        if self.rank is not None:
            out.update(rank=self.rank, entered=self.entered)
        if self.judged is not None:
            out["judged"] = self.judged
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any], cause: Cause | None = None) -> Divergence:
        return cls(cause or Cause(d["kind"]), Site.from_json(d), d.get("rel_diff"),
                   tuple(Site.from_json(c) for c in d.get("candidates") or ()), d.get("pinned_by"), d.get("path"),
                   bool(d.get("inputs_agree")), bool(d.get("may_start_earlier")), d.get("note") or "",
                   Site.from_json(d["observed"]) if d.get("observed") else None,
                   Site.from_json(d["b"]) if d.get("b") else None,
                   TensorEvidence.from_json(d["tensor"]) if d.get("tensor") else None, d.get("narrowing"),
                   d.get("rank"), d.get("entered"), d.get("judged"), rule=d.get("rule") or "")


@dataclass(frozen=True)
class RankVerdict:
    """One rank of a distributed comparison: rank R of run A against rank R of run B."""

    rank: int
    verdict: Verdict
    traces: tuple[str, ...]
    first_divergence: Divergence | None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "verdict": self.verdict.value, "traces": list(self.traces),
                "first_divergence": self.first_divergence.to_json() if self.first_divergence else None,
                "notes": list(self.notes)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RankVerdict:
        first = d.get("first_divergence")
        return cls(d["rank"], Verdict(d["verdict"]), tuple(d.get("traces") or ()),
                   Divergence.from_json(first) if first else None, tuple(d.get("notes") or ()))


# The keys of a run's summary, in the report's order; a run that left no readable trace has only some.
_RUN_KEYS = ("backend", "complete", "ops", "compile_calls", "error", "failure", "dropped_compile_options",
             "returncode", "timed_out", "elapsed_s", "log", "output_tail")
_UNREAD_RUN_KEYS = ("backend", "failure", "returncode", "timed_out", "log", "output_tail")


@dataclass(frozen=True)
class RunSummary:
    """One recorded run as the report gives it: its trace's footer, and how the process ended."""

    backend: str | None
    failure: str | None  # one line on why it failed, None if it did not
    complete: bool | None = None  # None: the trace could not be read at all
    ops: int | None = None
    compile_calls: int | None = None
    error: dict[str, Any] | None = None  # what the script raised (the footer's `error`)
    dropped_compile_options: tuple[str, ...] = ()
    returncode: int | None = None
    timed_out: bool | None = None
    elapsed_s: float | None = None
    log: str | None = None
    output_tail: tuple[str, ...] = ()
    has_process: bool = True  # False for a trace diffed without its run (`tracediff diff`)

    def to_json(self) -> dict[str, Any]:
        values = {"backend": self.backend, "complete": self.complete, "ops": self.ops,
                  "compile_calls": self.compile_calls, "error": self.error, "failure": self.failure,
                  "dropped_compile_options": list(self.dropped_compile_options), "returncode": self.returncode,
                  "timed_out": self.timed_out, "elapsed_s": self.elapsed_s, "log": self.log,
                  "output_tail": list(self.output_tail)}
        if self.complete is None:
            return {k: values[k] for k in _UNREAD_RUN_KEYS}
        return {k: values[k] for k in (_RUN_KEYS if self.has_process else _RUN_KEYS[:7])}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunSummary:
        return cls(d.get("backend"), d.get("failure"), d.get("complete"), d.get("ops"), d.get("compile_calls"),
                   d.get("error"), tuple(d.get("dropped_compile_options") or ()), d.get("returncode"),
                   d.get("timed_out"), d.get("elapsed_s"), d.get("log"), tuple(d.get("output_tail") or ()),
                   has_process="returncode" in d)


@dataclass(frozen=True)
class Comparison:
    """What the alignment and comparison of two readable traces counted."""

    inherited: int
    inherited_complete: bool
    compared: int
    paired: int
    unpaired_a: int
    unpaired_b: int
    structure_count: int
    structure_examples: tuple[str, ...]
    strict_structure: bool
    nan_origin_a: dict[str, Any] | None
    nan_origin_b: dict[str, Any] | None
    compiled: bool


@dataclass(frozen=True)
class Outcome:
    """Everything `tracediff run` and `diff` decided. Stages after the verdict (narrowing, bisection,
    determinism advice, repeats) return a new Outcome (`dataclasses.replace`); `to_json` writes the JSON
    contract of docs/design.md §6, `from_json` reads it back."""

    verdict: Verdict
    traces: tuple[str, ...]
    first_divergence: Divergence | None
    runs: tuple[RunSummary, ...]
    notes: tuple[str, ...]
    comparison: Comparison | None  # None: a run left no trace that could be read
    header_differences: tuple[str, ...] = ()  # e.g. `torch: '2.12' -> '2.13'`
    program_differences: tuple[str, ...] = ()
    tolerances: dict[str, dict[str, float]] = field(default_factory=dict)
    exact: bool = False
    calibration: dict[str, Any] | None = None  # --calibrate: the noise the comparison used
    determinism: dict[str, Any] | None = None  # two runs of one backend: the cause and advice
    repeat: tuple[dict[str, Any], ...] | None = None  # --repeat: every comparison made
    repeat_count: int | None = None
    run_dir: str | None = None
    script: str | None = None
    bisect: dict[str, Any] | None = None  # `tracediff bisect`: the stage found (None: none found)
    bisect_steps: tuple[dict[str, Any], ...] | None = None
    oracle_calls: int | None = None
    bisected: bool = False  # the bisect keys are written (`bisect` may be null)
    ranks: tuple[RankVerdict, ...] | None = None  # a distributed run: every rank's comparison
    replicas: tuple[dict[str, Any], ...] | None = None  # a distributed run: each run's replica check
    # A run judged on its own inputs (judge/, diff/same_inputs.py): what its checks came to; and, where every
    # compiled call was right but the traces differ, where the runs drift apart (the trace rules' finding).
    same_inputs: dict[str, Any] | None = None
    drift: dict[str, Any] | None = None
    # `run --light`: the compiled-calls traces, how many calls were judged, and the window recorded in depth.
    light: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return int(self.verdict.exit_code)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verdict": self.verdict.value, "exit_code": self.exit_code,
                               "traces": list(self.traces),
                               "first_divergence": self.first_divergence.to_json() if self.first_divergence else None}
        c = self.comparison
        if c is None:
            out.update(runs=[r.to_json() for r in self.runs], notes=list(self.notes))
        else:
            out.update(inherited=c.inherited, inherited_complete=c.inherited_complete, compared=c.compared,
                       paired=c.paired, unpaired={"a": c.unpaired_a, "b": c.unpaired_b},
                       structure={"count": c.structure_count, "examples": list(c.structure_examples),
                                  "strict": c.strict_structure},
                       nan_origin={"a": c.nan_origin_a, "b": c.nan_origin_b}, compiled=c.compiled,
                       runs=[r.to_json() for r in self.runs], header_differences=list(self.header_differences),
                       program_differences=list(self.program_differences), tolerances=self.tolerances,
                       exact=self.exact, notes=list(self.notes))
        optional = {"calibration": self.calibration, "determinism": self.determinism,
                    "repeat": list(self.repeat) if self.repeat is not None else None,
                    "repeat_count": self.repeat_count, "run_dir": self.run_dir, "script": self.script,
                    "ranks": [r.to_json() for r in self.ranks] if self.ranks is not None else None,
                    "replicas": list(self.replicas) if self.replicas is not None else None,
                    "same_inputs": self.same_inputs, "drift": self.drift, "light": self.light}
        out.update({k: v for k, v in optional.items() if v is not None})
        if self.bisected:
            out.update(bisect=self.bisect, bisect_steps=list(self.bisect_steps or ()), oracle_calls=self.oracle_calls)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Outcome:
        first = d.get("first_divergence")
        comparison = None
        if "compared" in d:
            unpaired, structure, nan = d.get("unpaired") or {}, d.get("structure") or {}, d.get("nan_origin") or {}
            comparison = Comparison(d.get("inherited", 0), d.get("inherited_complete", True), d["compared"],
                                    d.get("paired", 0), unpaired.get("a", 0), unpaired.get("b", 0),
                                    structure.get("count", 0), tuple(structure.get("examples") or ()),
                                    bool(structure.get("strict")), nan.get("a"), nan.get("b"),
                                    bool(d.get("compiled")))
        return cls(Verdict(d["verdict"]), tuple(d.get("traces") or ()), Divergence.from_json(first) if first else None,
                   tuple(RunSummary.from_json(r) for r in d.get("runs") or ()), tuple(d.get("notes") or ()),
                   comparison, tuple(d.get("header_differences") or ()), tuple(d.get("program_differences") or ()),
                   d.get("tolerances") or {}, bool(d.get("exact")), d.get("calibration"), d.get("determinism"),
                   tuple(d["repeat"]) if d.get("repeat") is not None else None, d.get("repeat_count"),
                   d.get("run_dir"), d.get("script"), d.get("bisect"),
                   tuple(d["bisect_steps"]) if d.get("bisect_steps") is not None else None, d.get("oracle_calls"),
                   bisected="bisect_steps" in d,
                   ranks=tuple(RankVerdict.from_json(r) for r in d["ranks"]) if d.get("ranks") is not None else None,
                   replicas=tuple(d["replicas"]) if d.get("replicas") is not None else None,
                   same_inputs=d.get("same_inputs"), drift=d.get("drift"), light=d.get("light"))
