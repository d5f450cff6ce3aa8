"""Where NaN/Inf first appear in one recording.

The *origin* is the first op (or inductor kernel) whose outputs hold NaN or
Inf while all its inputs are finite: the place to fix, whatever happens
downstream. For a fused kernel the origin is the kernel, and its fused ops
(with their source lines) are the ones that can have made the value.

Ops that make Inf on purpose from a non-finite constant (`masked_fill(mask,
-inf)`, `torch.full(size, -inf)`, `torch.tensor(-inf)`) are not origins, nor
are generated kernels that fuse one (a causal mask built inside the kernel):
overflow and invalid operations are what is reported, not masks. When NaN/Inf is read by an op
although no recorded op made it, it came from outside the recording (data,
a loaded checkpoint): that is reported as `entered`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracediff.diff.compare import has_nonfinite
from tracediff.diff.place import Place, makes_nonfinite, read_inputs
from tracediff.trace.reader import Trace, read_footer
from tracediff.trace.schema import KERNEL, OP, REGION, Tensor, TraceRecord

# Non-finite values made on purpose (masked_fill with -inf ...) are remembered
# so a later read of them is not mistaken for NaN entering from outside.
_MADE_LIMIT = 1_000_000


def _tensor(t: Tensor) -> dict[str, Any]:
    fp = t.get("fp") or {}
    return {"arg": t.get("a"), "dtype": t.get("dt"), "shape": t.get("sh"), "nan": fp.get("nan", 0),
            "inf": fp.get("inf", 0), "n": fp.get("n"), "max": fp.get("max")}


@dataclass(frozen=True)
class NanOrigin:
    """The first record that made NaN/Inf from finite inputs."""

    place: Place
    outputs: tuple[dict[str, Any], ...]  # the non-finite outputs: arg, dtype, shape, nan/inf counts
    inputs: tuple[dict[str, Any], ...]  # all (finite) inputs
    fuses: tuple[dict[str, Any], ...] = ()  # a kernel: its fused ops, graph order

    @classmethod
    def of(cls, record: TraceRecord) -> NanOrigin:
        outs = tuple(_tensor(t) for t in record.get("out", ()) if has_nonfinite(t.get("fp")) and not t.get("uninit"))
        fuses = tuple({"op": f.get("op"), "source": f.get("src"), "module": f.get("m")}
                      for f in record.get("fuses") or ()) if record["t"] == KERNEL else ()
        return cls(Place.of(record), outs, tuple(_tensor(t) for t in read_inputs(record) if t.get("fp")), fuses)

    @property
    def index(self) -> int:
        return self.place.index

    @property
    def op(self) -> str:
        return self.place.op

    @property
    def source(self) -> str | None:
        return self.place.source

    def as_dict(self) -> dict[str, Any]:
        return {**self.place.as_dict(), "outputs": list(self.outputs), "inputs": list(self.inputs),
                "fuses": list(self.fuses)}


def origin_of(record: TraceRecord) -> NanOrigin | None:
    """The record as a NaN origin, or None if it is not one."""
    return NanOrigin.of(record) if makes_nonfinite(record) else None


@dataclass(frozen=True)
class NanScan:
    """What a scan of one trace found: the origin, or where NaN/Inf entered from outside."""

    path: str
    origin: NanOrigin | None
    entered: Place | None  # first record reading NaN/Inf that no recorded op made
    records: int  # records read (the scan stops at the origin)
    truncated: bool  # no footer: the writer was killed; later records are unknown

    @property
    def found(self) -> bool:
        return self.origin is not None or self.entered is not None

    def as_dict(self) -> dict[str, Any]:
        return {"trace": self.path, "origin": self.origin.as_dict() if self.origin else None,
                "entered": self.entered.as_dict() if self.entered else None, "records": self.records,
                "truncated": self.truncated}


def _key(t: Tensor) -> tuple[int | None, int | None]:
    return t.get("id"), t.get("v")


def scan(path: str | Path) -> NanScan:
    """Stream `path` until the first NaN/Inf origin (or NaN/Inf read from outside)."""
    trace = Trace(path)
    made: set[tuple[int | None, int | None]] = set()  # non-finite values some recorded record produced
    entered: Place | None = None
    records = 0
    for record in trace:
        records += 1
        if record["t"] not in (OP, KERNEL, REGION):
            continue
        origin = origin_of(record)
        if origin is not None:
            # Stopped early: whether the writer finished shows only at the file's end.
            return NanScan(str(path), origin, entered, records, read_footer(path) is None)
        # An initializer's or copy_'s `self` is overwritten, not read (torch.empty garbage is no NaN source).
        if entered is None and any(has_nonfinite(t.get("fp")) and _key(t) not in made for t in read_inputs(record)):
            entered = Place.of(record)
        if record["t"] != REGION or record["ev"] == "exit":
            for t in record.get("out", ()):
                if has_nonfinite(t.get("fp")) and len(made) < _MADE_LIMIT:
                    made.add(_key(t))
    return NanScan(str(path), None, entered, records, trace.truncated)
