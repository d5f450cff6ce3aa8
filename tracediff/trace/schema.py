"""The trace file format: one JSON object per line.

Line 1 is the header, then records, then a footer. A file without a footer was
cut off (crash, kill) and still reads back; readers mark it truncated.

Records hold strings and numbers only, never tensors. Keys are short because a
long program writes millions of records.

header  {"t": "header", "schema": 2, "tracediff": ..., "torch": ..., "device": ...,
         "backend": ..., "command": [...], "seed": ..., "fingerprint": [...],
         "settings": {...}, "rank": 0, "world_size": 1, ...}
         `settings.inductor` is null in a run no compile could take to inductor (an eager recording:
         reading inductor's config imports dynamo); header differences then leave it out.
op      {"t": "op", "i": seq, "op": "aten::cos", "d": depth, "m": module path,
         "src": "model.py:42", "path": "/abs/model.py", "code": "y = torch.cos(x)",
         "in": [tensor...], "out": [tensor...], "bw": true (backward only),
         "g": "graph name" (inside a compiled region only),
         "nfs": true (a scalar argument is NaN/Inf, e.g. masked_fill(mask, -inf)),
         "sa": digest of the arguments that are not tensors, "gs": a collective's group size
         (both in one rank of several only: comparing ranks, diff/replicas.py)}
region  {"t": "region", "i": seq, "ev": "enter" | "exit", "name": "Net.forward",
         "r": region number, "call": call number, "in"/"out": [tensor...]}
         A region is one call of a function the script passed to torch.compile,
         recorded under every backend (eager included), so both runs share it.
kernel  {"t": "kernel", "i": seq, "name": "cpp_fused_cos_sin_0", "site": "cpp_fused_cos_sin_0:2",
         "g": graph key, "d": depth, "m": module, "src"/"path"/"code": of the last fused op,
         "fuses": [{"node", "op": "aten::sin", "src", "path", "m",
                    "nfs": true (a NaN/Inf literal argument, e.g. full([n, n], -inf)),
                    "orig": "aten::threshold_backward" (the op it was decomposed from, where known; a name
                    over 40 characters cut, ending "...")}...] in graph order,
         "in": [buffers read], "out": [buffers written]}
         One launch of an inductor-generated kernel (record/kernels.py).
check   {"t": "check", "at": seq of the next record, "g": "graph 0", "call": n, "ph": "fw" | "bw", "d": depth, "m": module,
         "outs": [measurement...], "rc": [region name, region call], "culprit": {...}, "site": {"src", "path", "code"},
         "unjudged": why the call could not be re-run, "no64": why it was judged against eager alone (each optional)}
         One call of a compiled graph judged on its own inputs (record/judging/): each output of the compiled code
         ("out0", an input written in place, "grad of <input>") measured against eager and float64 on the
         same inputs (judge/measure.py's Measurement). `culprit`, on the first wrong call of a graph: the node
         a bisection over the graph's prefixes found ("node", "op", "ops", "src", "path", "code", "m",
         "steps"; "note" where it could not narrow; "unconfirmed"), and `site` the program line that made the call
         where the search named no op. Only in a run recorded with the judge on. Readers keep
         checks apart from the other records (`Trace.checks`): they take no index, and align with nothing.
footer  {"t": "footer", "complete": true, "records": n, "ops": n,
         "kernels": n (generated kernel launches recorded: the run executed inductor's code),
         "compile_calls": n, "error": null | {"type", "message", "traceback"},
         "elapsed_s": seconds, "ended": epoch seconds (which rank of a distributed run failed first),
         "local_modules": [{"name", "file"}...] (modules imported from the script's folder;
         `tracediff repro` copies them beside the repro),
         "child_processes": n (forked children that ran ops; never recorded, record/fork.py),
         "process_group": {"backend": "nccl", "size": 2} (one rank of several, once the script made the
         default group: unknown when the header is written)}

tensor  {"a": arg name, "id": tensor id, "v": version, "dt": "float32",
         "sh": [2, 3], "dev": "cpu", "fp": fingerprint | null}
         `id` is stable for one tensor object within a trace, so an input whose id
         equals an earlier output's id was produced by that op (dataflow).
         "b": base id (views only): the tensor whose storage this view shares (torch's
         `_base`, the root of a chain of views; autograd links them after the view
         op, so the view op's own output has no `b` yet). A view shares its base's version
         counter, so an op writing the view (in place, out=, a kernel) makes value
         `v` of the base too: `v[idx] = x` changes what `base` holds.
         "unread": true (outputs only): a tensor written in place without being returned, listed for
         dataflow, not fingerprinted (fp null): a collective's output still in flight. (Traces before
         issue 48 also marked an in-place foreach or fused optimizer step's writes so; they are now
         fingerprinted.)
         "nt": "jagged" | "strided": a nested tensor, described by its values buffer (shape and
         fingerprint); it has no single shape.
         "pl": "R" | "S" (one rank of several, a DTensor, described by its local shard): replicated on
         every mesh dimension, or sharded or partial (each rank holds its own part)
         "ft": level (regions and kernels only): a torch.func wrapper (vmap, grad, jvp)
         seen outside the dispatcher, described by the tensor it wraps (record/functorch.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, TypeVar, cast

SCHEMA_VERSION = 2

HEADER = "header"
FOOTER = "footer"
OP = "op"
REGION = "region"
KERNEL = "kernel"
CHECK = "check"

RECORD_TYPES = frozenset({OP, REGION, KERNEL, CHECK})


# The records as types: for readers of the code and for mypy. At run time records stay plain dicts (a
# TypedDict is one), built and read by key; `total=False` keys are written only where they apply.

class Fingerprint(TypedDict, total=False):
    """Statistics of a tensor's finite elements (record/fingerprints/fingerprint.py)."""

    sum: float
    l1: float
    l2: float  # the Euclidean norm
    max: float  # max |x|
    nan: int
    inf: int
    n: int  # elements
    sk: list[float]  # the sketch: SKETCH_WIDTH signed sums, whose difference estimates an L2 distance
    hash: str  # `--exact` only: a hash of the bytes


_Statistics = TypeVar("_Statistics", bound=Mapping[str, Any])


def without_sketch(fp: _Statistics) -> _Statistics:
    """`fp` but its order-dependent sketch (`fp` itself when it has none): what the same values in another order
    share with it. The recorder gives a transposed view its base's fingerprint so; the diff compares a generated
    kernel's buffer so, whose nominal layout (the tensor object the wrapper passes) need not be the order the
    kernel writes (a reused buffer reinterpreted)."""
    return cast(_Statistics, {k: v for k, v in fp.items() if k != "sk"}) if "sk" in fp else fp


class Tensor(TypedDict, total=False):
    a: str  # the argument's name (an output: its position)
    id: int  # stable for one tensor object within a trace
    v: int | None  # its version counter
    dt: str  # "float32"
    sh: list[int]
    dev: str  # "cpu", "cuda:0"
    fp: Fingerprint | None  # None: not fingerprinted (no data, or an unread write)
    b: int  # a view's base id
    unread: bool  # written in place and not returned
    uninit: bool  # uninitialized memory (`empty`) or a kernel's scratch: never compared
    ft: int  # a torch.func wrapper's level
    pl: str  # one rank of several, a DTensor (described by its local shard): "R" replicated, "S" sharded or partial
    nt: str  # a nested tensor's layout ("jagged", "strided"), described by its values buffer


class FusedOp(TypedDict, total=False):
    """One aten op inside a generated kernel."""

    node: str
    op: str
    src: str | None
    path: str | None
    m: str | None
    nfs: bool
    orig: str  # the op the node was decomposed from (record/original_aten.py)


class OpRecord(TypedDict, total=False):
    t: str  # OP
    i: int
    op: str  # "aten::cos", "aten::addmm.out" (op_names.op_name)
    d: int  # depth: modules plus compiled regions entered
    m: str | None  # module path
    src: str  # "model.py:42"
    path: str
    code: str
    g: str  # the compiled graph it ran in
    bw: bool  # run by autograd's backward
    nfs: bool  # a scalar argument is NaN/Inf (a mask)
    sa: str  # one rank of several: a digest of the arguments that are not tensors (record/spmd_args.py)
    gs: int | None  # one rank of several, a collective: the ranks its process group spans
    # "in"/"out" (keywords in Python): list[Tensor]


class KernelRecord(TypedDict, total=False):
    t: str  # KERNEL
    i: int
    name: str  # "cpp_fused_cos_sin_0"
    site: str | None
    g: str
    d: int
    m: str | None
    src: str
    path: str
    code: str
    fuses: list[FusedOp]
    bw: bool


class RegionRecord(TypedDict, total=False):
    t: str  # REGION
    i: int
    ev: str  # "enter" | "exit"
    name: str  # "Net.forward"
    r: int  # region number
    call: int
    d: int
    m: str | None


# A record as a reader of a trace sees it, before it asks "t" what it is: every key an op, kernel or region
# record may hold. Readers (trace/reader.py's Trace, diff/, report/) take this type; the three classes above
# say which keys belong to which record type. ("in" and "out" are keywords, hence the call syntax.)
TraceRecord = TypedDict("TraceRecord", {
    "t": str, "i": int, "d": int, "m": str | None, "g": str, "bw": bool,
    "src": str | None, "path": str | None, "code": str | None,
    "in": list[Tensor], "out": list[Tensor],
    "op": str, "nfs": bool, "sa": str, "gs": int | None,  # op
    "name": str, "site": str | None, "fuses": list[FusedOp],  # kernel (a region's "name" too)
    "ev": str, "r": int, "call": int,  # region
}, total=False)


class CheckRecord(TypedDict, total=False):
    """One compiled call judged on its own inputs (record/judging/graph.py). Kept apart from the other records
    (`Trace.checks`): it takes no index and aligns with nothing."""

    t: str  # CHECK
    at: int  # the index of the record after it
    d: int
    m: str | None
    g: str  # the compiled graph: "graph 0"
    call: int  # the graph's call number
    ph: str  # "fw" | "bw" (a compiled backward)
    outs: list[dict[str, Any]]  # per output, judge/measure.py's Measurement.as_record()
    rc: list[Any]  # the compiled region's call it ran in: [region name, call number]
    culprit: dict[str, Any]  # the prefix search's op: "node", "op", "ops", "src", "path", "code", "m", "steps", ...
    site: dict[str, Any]  # where the search named no op: the program line that made the call, {"src", "path", "code"}
    unjudged: str  # why the call could not be re-run (then `outs` is empty)
    no64: str  # why it was judged against eager alone (no float64 reference)


class Header(TypedDict, total=False):
    t: str  # HEADER
    schema: int
    tracediff: str
    torch: str
    python: str
    platform: str
    host: str
    device: str
    backend: str
    command: list[str]
    cwd: str
    seed: int | None
    fingerprint: list[str]
    # How CPU tensors' statistics were computed (record/fingerprints/fingerprint.py's host_fingerprint_path): traces of two paths
    # differ within float32 rounding, and the header differences say so.
    host_fingerprints: str
    exact: bool
    materialized: bool
    upcast: str | None  # "float64": a run recorded with every float op upcast (record/upcast.py)
    judged: bool  # each compiled call judged on its own inputs (record/judging/): the trace holds check records
    # Which ops it keeps (record/scope.py): {"kind": "all" | "calls" | "window", "window": "Net.forward@57" | None}
    scope: dict[str, Any]
    settings: dict[str, Any]
    rank: int
    world_size: int
    started: str


class ScriptError(TypedDict):
    type: str
    message: str
    traceback: str


class Footer(TypedDict, total=False):
    t: str  # FOOTER
    complete: bool
    records: int
    ops: int
    kernels: int
    compile_calls: int
    dropped_compile_options: list[str]
    elapsed_s: float
    ended: float  # the wall-clock time (epoch seconds) the recording ended
    child_processes: int
    error: ScriptError | None
    local_modules: list[dict[str, str]]
    # What the script changed in inductor (record/customizations.py): {"decompositions", "lowerings", "passes"}
    compiler_customizations: dict[str, list[str]]
    process_group: dict[str, Any]  # one rank of several: {"backend": "gloo", "size": 2}
    # Ops tracediff failed to record (its own error; the program went on): {"count", "first"}
    recorder_failures: dict[str, Any]
    # A judged run: {"policy": "every call" | "time budget" | "window", "calls", "judged", "spent_s"} (forward calls)
    judging: dict[str, Any]
