"""Pass 1 of a diff: reduce a trace to integer keys for alignment.

Only a few machine words per record stay in memory, so traces of millions of
ops align without holding their records. Past `IN_MEMORY_RECORDS` records the
keys go to files in a spill folder, and the alignment reads them a window at a
time (align.py's `align_in_windows`): tens of millions of records diff in
bounded memory. Pass 2 (verdict) re-reads the files in the same order, using
`alignable` to skip the same records.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from tracediff.diff.nan_origin import NanOrigin
from tracediff.diff.place import makes_nonfinite
from tracediff.op_names import NO_VALUE_OPS, base_op, is_collective, short
from tracediff.trace.reader import Trace
from tracediff.trace.schema import KERNEL, OP, REGION, CheckRecord, Fingerprint, Footer, Header, Tensor, TraceRecord


def chain_op(record: TraceRecord) -> str | None:
    """The op a record computes: its own, or for a kernel the last op it fuses (whose value it writes)."""
    if record["t"] == KERNEL:
        fuses = record.get("fuses") or []
        return fuses[-1]["op"] if fuses else None
    return record.get("op")


def op_line_key(record: TraceRecord) -> int:
    """The op a record computes (see `chain_op`) and its source line: does the other run compute
    that op at that line at all (or did a compiler pass put it there)?"""
    op = chain_op(record)
    return _op_line(base_op(op) if op else None, record.get("src"))


def _op_line(base: str | None, source: str | None) -> int:
    return hash((base, source))


def alignable(record: TraceRecord) -> bool:
    kind = record["t"]
    if kind == OP:
        return base_op(record["op"]) not in NO_VALUE_OPS
    return kind in (REGION, KERNEL)


def _signature(tensors: list[Tensor]) -> tuple:
    return tuple([(t["dt"], tuple(t["sh"])) for t in tensors])  # a list first: faster than a generator


def _round(x: float) -> float:
    return float(f"{x:.4g}")


# A sum smaller than this fraction of the sum of magnitudes is mostly cancellation: its leading
# digits are rounding noise (a layer norm's output sums to about 1e-6 of its l1), so it is keyed as 0.
_CANCELLED_SUM = 1e-3


def _stable_sum(fp: Fingerprint) -> float:
    return 0.0 if abs(fp["sum"]) <= _CANCELLED_SUM * fp["l1"] else _round(fp["sum"])


# Sketch entries at least this fraction of l2 away from zero (a sketch entry's spread is about l2): their
# signs survive rounding noise, and they tell a square matrix from its transpose, which no other
# statistic does.
_SKETCH_SIGN_FLOOR = 0.25


def _sketch_signs(fp: Fingerprint) -> tuple[int, ...]:
    """The signs of the fingerprint's large sketch entries (0 for the small ones; () without a sketch)."""
    floor = _SKETCH_SIGN_FLOOR * (fp.get("l2") or 0.0)
    return tuple(1 if s > floor else -1 if s < -floor else 0 for s in fp.get("sk") or ())


def kernel_origin(name: str) -> str | None:
    """The aten ops a generated kernel is named after (inductor names a kernel for the ops its nodes
    came from before decomposition, sorted): `triton_poi_fused_addmm_1` -> `addmm`,
    `cpp_fused_add_native_layer_norm_3` -> `add_native_layer_norm`; None for other names."""
    fused = name.partition("_fused_")[2]
    return fused.rstrip("0123456789").rstrip("_") or None


def _named_key(kind: str, name: str, src: str | None, signature: tuple) -> int:
    """A key pairing an op with a kernel named for it, at the same source line and first output's
    shape (eager `addmm` and the kernel adding its bias after an extern `mm`); 0 where there is none.
    The first output only: a kernel writes one of a multi-output op's values (a `native_layer_norm`
    decomposed into kernels writes its normalized output apart from its mean and rstd). `name`: a kernel's
    name, or an op's."""
    if not src:
        return 0
    named = kernel_origin(name) if kind == KERNEL else short(name)
    return hash(("named", src, named, signature[:1])) if named else 0


class RecordKeys(NamedTuple):
    """The hashes one alignable record is aligned by (`keys_of`)."""

    primary: int  # op family and output shapes
    signature: int  # output shapes only
    value: int | None  # the first output's rounded fingerprint; None where there is no value to match on
    # The same with its rounded max, which tells apart values whose sums cancel and whose l1 round alike (a
    # residual add and the layer norm of it), and the signs of its sketch's large entries, which tell a square
    # matrix from its transpose.
    fine_value: int | None
    named: int  # see `_named_key`
    coarse: int  # the first output's magnitude, binned (`_coarse`); 0 for no value
    coarse_shifted: int
    op_line: int  # `op_line_key`


class _StructureKeys(NamedTuple):
    """The keys of a record that depend on its kind, op (or kernel), line and output shapes, not its values."""

    primary: int
    signature: int
    named: int
    op_line: int


def _structure_keys(kind: str, op: str | None, name: str, src: str | None, signature: tuple) -> _StructureKeys:
    """`op`: the op the record computes (`chain_op`); `name`: a kernel's name, or the op."""
    base = base_op(op) if op else None
    # A kernel is keyed like the last op of its fused chain, whose value it writes.
    primary = hash((OP, base if op else base_op(name), signature))
    return _StructureKeys(primary, hash(("sig", signature)), _named_key(kind, name, src, signature), _op_line(base, src))


def _value_keys(outs: list[Tensor], signature: tuple) -> tuple[int | None, int | None, int, int]:
    """(value, fine_value, coarse, coarse_shifted) of the first output with a value (see RecordKeys)."""
    for t, dtype_and_shape in zip(outs, signature):
        fp = t.get("fp")
        if fp and not t.get("uninit") and fp.get("n"):
            content = (*dtype_and_shape, _stable_sum(fp), _round(fp["l1"]), fp["nan"], fp["inf"])
            coarse, shifted = _coarse(dtype_and_shape, fp.get("l1") or 0.0)
            return hash(content), hash((*content, _round(fp.get("max", 0.0)), _sketch_signs(fp))), coarse, shifted
    return None, None, 0, 0


def _region_keys(record: TraceRecord) -> RecordKeys:
    """A region's keys are its identity (named and coarse: 0)."""
    identity = hash(("region", record["ev"], record["name"], record["r"], record["call"]))
    return RecordKeys(identity, identity, identity, identity, 0, 0, 0, op_line_key(record))


def keys_of(record: TraceRecord) -> RecordKeys:
    """The keys of one alignable record (pass 1 keys a whole trace with one `_TraceKeys`, which remembers)."""
    return _TraceKeys().keys(record)


class _TraceKeys:
    """The keys of the records of one trace (`keys`), in pass 1. A trace repeats its ops step after step, so the
    keys that depend on a record's op, line and output shapes (`_StructureKeys`) are remembered by those, and
    only the value keys are worked out anew; so is whether an op moves values (`alignable`)."""

    # Distinct (kind, op, kernel name, line, output shapes) remembered: a trace's ops repeat, but a run of
    # dynamic shapes may make new ones without end.
    _REMEMBERED = 1 << 16

    def __init__(self) -> None:
        self._structures: dict[tuple, _StructureKeys] = {}
        self._ops: dict[str, tuple[bool, bool]] = {}  # op -> (moves values: `alignable`, `is_collective`)

    def alignable(self, record: TraceRecord) -> bool:
        """`alignable(record)`, an op's answer remembered."""
        kind = record["t"]
        if kind == OP:
            return self._op(record["op"])[0]
        return kind in (REGION, KERNEL)

    def is_collective(self, record: TraceRecord) -> bool:
        return record["t"] == OP and self._op(record["op"])[1]

    def _op(self, op: str) -> tuple[bool, bool]:
        facts = self._ops.get(op)
        if facts is None:
            facts = self._ops[op] = (base_op(op) not in NO_VALUE_OPS, is_collective(op))
        return facts

    def keys(self, record: TraceRecord) -> RecordKeys:
        kind = record["t"]
        if kind == REGION:
            return _region_keys(record)
        outs = record.get("out") or []
        signature = _signature(outs)
        src = record.get("src")
        if kind == KERNEL:
            name = str(record.get("name", ""))
            op = chain_op(record)
            remembered: tuple = (kind, op, name, src, signature)
        else:
            op = name = record["op"]
            remembered = (kind, op, src, signature)
        structure = self._structures.get(remembered)
        if structure is None:
            if len(self._structures) >= self._REMEMBERED:
                self._structures.clear()
            structure = self._structures[remembered] = _structure_keys(kind, op, name, src, signature)
        value, fine, coarse, shifted = _value_keys(outs, signature)
        return RecordKeys(structure.primary, structure.signature, value, fine, structure.named, coarse, shifted,
                          structure.op_line)


# Alignable records whose keys stay in memory; past them a skeleton built with a spill folder writes its
# keys to files (67 bytes a record: 10M records of two traces would take 1.3 GB). One window of the
# alignment holds this many records of each trace, so traces this short align in one piece, as they always have.
IN_MEMORY_RECORDS = 1_000_000
# Records appended to the spill files at a time.
_SPILL_CHUNK = 1 << 16
# The key columns: what the alignment reads (a window at a time, where spilled).
KEY_COLUMNS = ("primary", "signature", "value", "fine_value", "named", "coarse", "coarse_shifted", "has_value",
               "source", "backward")


@dataclass
class Skeleton:
    """Integer keys of a trace's alignable records, in order, plus its header/footer.

    The key columns (KEY_COLUMNS) hold every record, or, once `spilled`, none: they are then in files of
    that folder (`window` reads them). `is_region` always holds every record (the verdict counts them)."""

    path: Path
    header: Header
    footer: Footer | None = None
    truncated: bool = False
    primary: array = field(default_factory=lambda: array("q"))
    signature: array = field(default_factory=lambda: array("q"))
    value: array = field(default_factory=lambda: array("q"))
    fine_value: array = field(default_factory=lambda: array("q"))
    named: array = field(default_factory=lambda: array("q"))  # keys_of's named key, 0 for none
    # The first output's magnitude (l1) in bins of about 0.1%, and in bins shifted by half a bin: two values
    # within half a bin of each other share at least one (see `_coarse`).
    coarse: array = field(default_factory=lambda: array("q"))
    coarse_shifted: array = field(default_factory=lambda: array("q"))
    has_value: bytearray = field(default_factory=bytearray)
    source: array = field(default_factory=lambda: array("q"))  # hash of "file:line", 0 if unknown
    is_region: bytearray = field(default_factory=bytearray)
    backward: bytearray = field(default_factory=bytearray)  # run by autograd's backward (the record's `bw`)
    op_lines: set[int] = field(default_factory=set)  # `op_line_key`s of its ops and kernels
    regions: int = 0
    ops: int = 0
    nan_origin: NanOrigin | None = None  # first op or kernel making NaN/Inf from finite inputs
    checks: list[CheckRecord] = field(default_factory=list)  # compiled calls judged on their inputs (record/judging/)
    spilled: Path | None = None  # the folder of the key columns' files, once they went to disk
    length: int = 0  # alignable records
    released: bool = False  # the key columns emptied once aligned (`release_keys`)

    def __len__(self) -> int:
        return self.length

    def window(self, lo: int, hi: int) -> Skeleton:
        """Records [lo, hi) as a skeleton of their own, its key columns in memory (read from the spill files)."""
        if self.released:
            raise RuntimeError(f"{self.path}: the key columns were released once aligned")
        hi = min(hi, self.length)
        columns: dict[str, Any] = {name: self._column(name, lo, hi) for name in KEY_COLUMNS}
        return replace(self, **columns, is_region=self.is_region[lo:hi], spilled=None, length=hi - lo)

    def _column(self, name: str, lo: int, hi: int) -> array | bytearray:
        column = getattr(self, name)
        if self.spilled is None:
            return column[lo:hi]
        size = 1 if isinstance(column, bytearray) else column.itemsize
        with open(self.spilled / name, "rb") as f:
            f.seek(lo * size)
            data = f.read((hi - lo) * size)
        if isinstance(column, bytearray):
            return bytearray(data)
        loaded = array(column.typecode)
        loaded.frombytes(data)
        return loaded

    def release_keys(self) -> None:
        """Empty the key columns, once aligned: the walk reads none of them, and a trace of a million records
        in memory holds about 70 MB of them."""
        for name in KEY_COLUMNS:
            del getattr(self, name)[:]
        self.released = True

    def spill_to(self, folder: Path) -> None:
        """Append the key columns in memory to their files in `folder`, and empty them."""
        folder.mkdir(parents=True, exist_ok=True)
        for name in KEY_COLUMNS:
            column = getattr(self, name)
            with open(folder / name, "ab") as f:
                f.write(column.tobytes() if isinstance(column, array) else bytes(column))
            del column[:]
        self.spilled = folder


# Bins per decade of a coarse key: 2300 make a bin about 0.1% wide.
_COARSE_BINS = 2300


def _coarse(dtype_and_shape: tuple, l1: float) -> tuple[int, int]:
    """Two keys of a value's dtype, shape and magnitude (l1), binned at about 0.1% and at the bins shifted by
    half: values within 0.05% of each other share one of them."""
    if not 0 < l1 < math.inf:
        return hash((*dtype_and_shape, l1)), hash((*dtype_and_shape, l1))
    x = math.log10(l1) * _COARSE_BINS
    return hash((*dtype_and_shape, math.floor(x))), hash((*dtype_and_shape, "shifted", math.floor(x + 0.5)))


class _CollectiveKeys:
    """Collectives as anchors of the alignment: the n-th collective of an op with given inputs in A
    pairs with the n-th such in B (the value tier), whatever their values. Ranks must call
    collectives in one order, so a run compiled otherwise still calls the same ones in the same order;
    their outputs are read only after they complete, so they have no value of their own to pair on."""

    def __init__(self) -> None:
        self._seen: dict[tuple, int] = {}

    def key(self, record: TraceRecord) -> int:
        kind = (base_op(record["op"]), _signature(record.get("in") or []))
        self._seen[kind] = self._seen.get(kind, 0) + 1
        return hash(("collective", kind, self._seen[kind]))


def _has_nonfinite_output(record: TraceRecord) -> bool:
    """Has an output NaN or Inf? Only then can the record be a NaN origin (`makes_nonfinite`, which asks more)."""
    for t in record.get("out") or ():
        fp = t.get("fp")
        if fp and (fp.get("nan") or fp.get("inf")):
            return True
    return False


def build_skeleton(path: str | Path, spill: Path | None = None) -> Skeleton:
    """Pass 1 over one trace. With `spill`, a folder of its own: past IN_MEMORY_RECORDS alignable records,
    the key columns go to files there (see `Skeleton.window`)."""
    trace = Trace(path)
    skeleton = Skeleton(Path(path), trace.header)
    collectives = _CollectiveKeys()
    trace_keys = _TraceKeys()
    for record in trace:
        kind = record["t"]
        if kind == OP:
            skeleton.ops += 1
        elif kind == REGION:
            skeleton.regions += 1
        if skeleton.nan_origin is None and _has_nonfinite_output(record) and makes_nonfinite(record):
            skeleton.nan_origin = NanOrigin.of(record)
        if not trace_keys.alignable(record):
            continue
        skeleton.is_region.append(kind == REGION)
        keys = trace_keys.keys(record)
        value, fine = keys.value, keys.fine_value
        if trace_keys.is_collective(record):
            value = fine = collectives.key(record)
        src = record.get("src")
        skeleton.primary.append(keys.primary)
        skeleton.signature.append(keys.signature)
        skeleton.value.append(value if value is not None else 0)
        skeleton.fine_value.append(fine if fine is not None else 0)
        skeleton.has_value.append(value is not None)
        skeleton.named.append(keys.named)
        skeleton.coarse.append(keys.coarse)
        skeleton.coarse_shifted.append(keys.coarse_shifted)
        skeleton.source.append(hash(src) if src else 0)
        skeleton.backward.append(bool(record.get("bw")))
        skeleton.length += 1
        skeleton.op_lines.add(keys.op_line)
        if spill is not None and len(skeleton.primary) >= (_SPILL_CHUNK if skeleton.spilled else IN_MEMORY_RECORDS):
            skeleton.spill_to(spill)
    if skeleton.spilled is not None:
        skeleton.spill_to(skeleton.spilled)
    skeleton.footer = trace.footer
    skeleton.checks = trace.checks
    skeleton.truncated = trace.truncated
    return skeleton
