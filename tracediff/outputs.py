"""Output paths, checked before anything runs.

A run can take minutes; an output path that cannot be written must fail
before it starts, as one line and exit 2, not as a traceback (exit 1 would
read as "divergence") after the runs. Writability is probed by creating a
file, not with `os.access`: as root, permission bits say nothing, while a
parent that is a regular file or a read-only file system still fails.
"""

from __future__ import annotations

import datetime
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tracediff.errors import UserError


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def ensure_dir(path: str | os.PathLike[str], option: str) -> Path:
    """Create the directory `path` (and its parents) and check a file can be made in it."""
    target = Path(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"{option} {path}: exists and is not a directory") from None
    except OSError as e:
        raise UserError(f"{option} {path}: cannot create the directory ({_reason(e)})") from None
    _probe(target, f"{option} {path}")
    return target


def check_file(path: str | os.PathLike[str], option: str) -> Path:
    """A file path that can be created or overwritten; its directory must exist."""
    target = Path(path)
    if target.is_dir():
        raise UserError(f"{option} {path}: is a directory; give a file name")
    parent = target.parent
    if not parent.exists():
        raise UserError(f"{option} {path}: directory {parent} does not exist")
    if not parent.is_dir():
        raise UserError(f"{option} {path}: {parent} is not a directory")
    if target.exists():
        try:
            with open(target, "a", encoding="utf-8"):
                pass
        except OSError as e:
            raise UserError(f"{option} {path}: cannot write ({_reason(e)})") from None
    else:
        _probe(parent, f"{option} {path}")
    return target


def _probe(directory: Path, what: str) -> None:
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise UserError(f"{what}: cannot write in {directory} ({_reason(e)})") from None


# The name ends of a trace: plain, or compressed as the last suffix says (trace/compression.py).
TRACE_SUFFIX = ".jsonl"
COMPRESSED_TRACE_SUFFIX = ".jsonl.zst"  # what `--compress` writes
TRACE_SUFFIXES = (".jsonl.gz", COMPRESSED_TRACE_SUFFIX, TRACE_SUFFIX)
# The digest index written beside a long trace: `t.jsonl` -> `t.jsonl.idx` (trace/digest_index.py).
INDEX_SUFFIX = ".idx"


def rank_path(path: Path, environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """`t.jsonl` -> `t.rank1.jsonl` (`t.jsonl.zst` -> `t.rank1.jsonl.zst`) in rank 1 of a distributed launch
    (torchrun sets RANK and WORLD_SIZE): every rank writes a trace of its own. Unchanged outside one, or with
    one process."""
    env = os.environ if environ is None else environ
    if int(env.get("WORLD_SIZE", "1") or 1) <= 1:
        return path
    return _with_rank(path, str(int(env.get("RANK", "0") or 0)))


def rank_pattern(path: Path) -> str:
    """The per-rank traces of `path`, as a shell pattern: `t.rank*.jsonl.zst`."""
    return str(_with_rank(path, "*"))


def _with_rank(path: Path, rank: str) -> Path:
    name = path.name
    stem, dot, suffixes = name.partition(".")
    return path.with_name(f"{stem}.rank{rank}{dot}{suffixes}" if dot else f"{name}.rank{rank}")


def log_path(trace: Path) -> Path:
    """The log kept beside a trace: `a-eager.jsonl` (or `.jsonl.gz`, `.jsonl.zst`) -> `a-eager.log`."""
    for suffix in TRACE_SUFFIXES:
        if trace.name.endswith(suffix) and trace.name != suffix:
            return trace.with_name(trace.name[: -len(suffix)] + ".log")
    return trace.with_suffix(".log")


_RANK_FILE = re.compile(r"^(?P<stem>.+?)\.rank(?P<rank>\d+)(?P<rest>(\..*)?)$")


def rank_set(path: Path) -> list[Path] | None:
    """The per-rank traces a path stands for, rank 0 first; None for a single trace (a file that exists).

    `t.jsonl` stands for `t.rank0.jsonl`, `t.rank1.jsonl`, ... where it does not exist itself; a directory
    for the one set of per-rank traces in it (`tracediff record --nproc-per-node` writes one). UserError
    when a directory holds several sets or a set misses a rank."""
    if path.is_file():
        return None
    if path.is_dir():
        sets: dict[tuple[str, str], dict[int, Path]] = {}
        for child in sorted(path.iterdir()):
            found = _RANK_FILE.match(child.name)
            if found and child.is_file() and not child.name.endswith(INDEX_SUFFIX):
                sets.setdefault((found["stem"], found["rest"]), {})[int(found["rank"])] = child
        if not sets:
            raise UserError(f"{path}: a directory with no per-rank traces (name.rank0.jsonl, ...) in it")
        if len(sets) > 1:
            names = ", ".join(str(path / f"{stem}{rest}") for stem, rest in sorted(sets))
            raise UserError(f"{path}: holds several sets of per-rank traces; name one of: {names}")
        (stem, rest), ranks = next(iter(sets.items()))
    else:
        stem, dot, rest = path.name.partition(".")
        rest = dot + rest
        ranks = {}
        for child in sorted(path.parent.glob(f"{stem}.rank*{rest}")) if path.parent.is_dir() else ():
            found = _RANK_FILE.match(child.name)
            if found and found["stem"] == stem and found["rest"] == rest:
                ranks[int(found["rank"])] = child
        if not ranks:
            return None
        path = path.parent
    missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
    if missing:
        raise UserError(f"{path / (stem + rest)}: the traces of rank(s) {', '.join(map(str, missing))} are missing "
                        "(a job on several nodes: gather every node's traces into one directory)")
    return [ranks[r] for r in sorted(ranks)]


def trace_name(slot: str, backend: str | None) -> str:
    """`b-inductor`: a run's slot (a: the reference, b: the compiled run) and its backend, safe as a file name."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", backend or "as-written")
    return f"{slot}-{safe}"


@dataclass(frozen=True)
class RunDir:
    """The layout of a run directory: every command asks it for the paths it writes there.

        a-eager.jsonl, b-inductor.jsonl     the reference and the compiled run (`trace`)
        a-eager.calls.jsonl, ...            the light mode's recordings of compiled calls only
        c-inductor-unfused.jsonl            narrowing's re-run, one kernel per op
        n-eager-float64.jsonl               the float64 noise reference (--calibrate)
        r0-eager.jsonl, r1-...              `--repeat`'s runs
        bisect-007.jsonl                    `tracediff bisect`'s trials (deleted once judged)
        fix-03.jsonl, fix-03-eager.jsonl    `tracediff fix`'s attempts; timing-<label>.json(l) its timings
        report.json, report.txt             `tracediff run`'s report; fix.json, fix.txt `tracediff fix`'s

    With `compress` (`--compress`, `compress: true`), every trace recorded there is zstd-compressed,
    `a-eager.jsonl.zst` and so on: a command given a RunDir writes what it says, whichever it is.
    """

    path: Path
    compress: bool = False

    @classmethod
    def create(cls, base: str | os.PathLike[str] | None, compress: bool = False) -> RunDir:
        """As given, or .tracediff/<timestamp>/ (unique); UserError if it cannot be written."""
        if base is not None:
            return cls(ensure_dir(base, "--out-dir"), compress)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(".tracediff") / stamp
        suffix = 1
        while path.exists():
            path = Path(".tracediff") / f"{stamp}-{suffix}"
            suffix += 1
        return cls(ensure_dir(path, "output directory"), compress)

    def __str__(self) -> str:
        return str(self.path)

    def _trace_file(self, stem: str) -> Path:
        return self.path / (stem + (COMPRESSED_TRACE_SUFFIX if self.compress else TRACE_SUFFIX))

    def trace(self, slot: str, backend: str | None) -> Path:
        return self._trace_file(trace_name(slot, backend))

    def calls_trace(self, slot: str, backend: str | None) -> Path:
        return self._trace_file(f"{trace_name(slot, backend)}.calls")

    def unfused_trace(self, backend: str | None) -> Path:
        return self._trace_file(f"{trace_name('c', backend)}-unfused")

    def float64_trace(self, backend: str | None) -> Path:
        return self._trace_file(f"{trace_name('n', backend)}-float64")

    def bisect_trace(self, step: int) -> Path:
        return self._trace_file(f"bisect-{step:03d}")

    def fix_trace(self, attempt: int, eager: bool = False) -> Path:
        return self._trace_file(f"fix-{attempt:02d}{'-eager' if eager else ''}")

    def timing(self, label: str) -> tuple[Path, Path]:
        """A timing run's times and its (unrecorded, so never compressed) trace path."""
        return self.path / f"timing-{label}.json", self.path / f"timing-{label}.jsonl"

    @property
    def report_json(self) -> Path:
        return self.path / "report.json"

    @property
    def report_text(self) -> Path:
        return self.path / "report.txt"

    @property
    def fix_json(self) -> Path:
        return self.path / "fix.json"

    @property
    def fix_text(self) -> Path:
        return self.path / "fix.txt"
