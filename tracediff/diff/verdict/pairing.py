"""Whether a pair from the aligner holds one quantity on both sides: the same op on the same arguments,
or different ops paired on shapes that read agreeing values (a substitution); and whether an input
of B's record was fed by a record only B runs (then a crossed pair is not one).
"""

from __future__ import annotations

from collections.abc import Callable

from tracediff.config import Tolerance
from tracediff.diff.align import SHAPE_TIER
from tracediff.diff.compare import TensorDiff
from tracediff.diff.skeleton import chain_op, kernel_origin
from tracediff.diff.verdict.b_side import BSideView, Made
from tracediff.diff.verdict.comparer import (
    Comparer,
    far_apart,
    pair_tensors,
)
from tracediff.op_names import base_op, short
from tracediff.trace.schema import KERNEL, OP, REGION, FusedOp, Tensor, TraceRecord


def kernel_named_for(kernel: TraceRecord, ra: TraceRecord) -> bool:
    """Does a kernel at A's op's line write that op's value? Inductor names a kernel after the aten ops
    its nodes came from before decomposition (`triton_poi_fused_addmm_22` adds the bias of an `addmm`
    that became `mm` + `add`), so a kernel at the same line named for A's op computes the same quantity."""
    if ra["t"] != OP or not ra.get("src") or kernel.get("src") != ra["src"]:
        return False
    name = short(ra["op"])
    return f"_{name}_" in f"_{kernel_origin(str(kernel.get('name', ''))) or ''}_"


def computes_past(kernel: TraceRecord, ra: TraceRecord) -> bool:
    """Does the kernel fuse A's op at its line and end, at that line, with another op? It writes that op's value,
    of which A's is only an intermediate: Mixtral's RMSNorm backward under inductor on CUDA fuses the two terms
    of the input's gradient, `mul` and `mul`, into their sum, where eager adds each to the residual's gradient in
    turn; paired by shapes with the second `mul`, the kernel's sum differed by 92%. A fused node is A's op by its
    name or, decomposed, by the op it came from (`orig`): a channels-last ResNet's backward on CUDA fuses the
    ReLU's `threshold_backward` (`le`, `where`) into batch norm backward's `(x - mean) * grad`, which it writes."""
    fuses = kernel.get("fuses") or []
    if not fuses or fuses[-1].get("src") != ra.get("src"):
        return False
    op = base_op(ra["op"])
    return not _is_op(fuses[-1], op) and any(_is_op(f, op) for f in fuses[:-1] if f.get("src") == ra.get("src"))


def _is_op(fused: FusedOp, op: str) -> bool:
    """Is a fused node the op `op` (its functional form), or decomposed from it?"""
    if base_op(fused["op"]) == op:
        return True
    original = fused.get("orig")
    if not original:
        return False
    if original.endswith("..."):  # FX cut the name at 40 characters (record/original_aten.py)
        return op.removeprefix("aten::").startswith(original[:-3].removeprefix("aten::"))
    return base_op(original) == op


# How close (relative) a kernel's output statistics must come to k times an input's to be k copies of it: the
# copies are summed in another order, so their statistics differ by rounding alone.
_COPY_RTOL = 1e-5


def only_copies_an_input(kernel: TraceRecord) -> bool:
    """Is every output of the kernel an input of it, copied or broadcast k times (an `expand` + `clone` of a
    mask)? Its order-free statistics say so: k times the elements, the sum, the L1 and the NaN and Inf counts,
    the same largest magnitude. Such a kernel computes nothing, so its name says nothing of its value: H200,
    Hugging Face Llama with gradient checkpointing, the kernel broadcasting the causal mask over the heads for
    the attention backward is named for the `mul` and `transpose` of the backward it feeds; paired by shapes with
    eager's `transpose` of the scaled gradient there, its -inf were a false "NaN/Inf counts differ"."""
    ins = [t for t in kernel.get("in") or () if t.get("fp") and not t.get("uninit")]
    outs = [t for t in kernel.get("out") or () if t.get("fp") and not t.get("uninit")]
    return bool(ins) and bool(outs) and all(any(_copies(o, i) for i in ins) for o in outs)


def _copies(out: Tensor, source: Tensor) -> bool:
    """Does `out` hold k copies of `source`'s elements (k >= 1), by their order-free statistics?"""
    fo, fi = out.get("fp"), source.get("fp")
    if not fo or not fi or out.get("dt") != source.get("dt"):
        return False
    n_out, n_in = int(fo.get("n") or 0), int(fi.get("n") or 0)
    if not n_in or n_out % n_in:
        return False
    k = n_out // n_in

    def close(stat: str) -> bool:
        x, y = fo.get(stat), fi.get(stat)
        return isinstance(x, float | int) and isinstance(y, float | int) and abs(x - k * y) <= _COPY_RTOL * abs(k * y)

    return (fo.get("nan") == k * int(fi.get("nan") or 0) and fo.get("inf") == k * int(fi.get("inf") or 0)
            and close("l1") and close("sum") and fo.get("max") == fi.get("max"))


def same_op(ra: TraceRecord, rb: TraceRecord) -> bool:
    """Do the two records compute the same op (a kernel: the last op it fuses)?"""
    if ra["t"] == REGION or rb["t"] == REGION:
        return ra["t"] == rb["t"]
    name_b = chain_op(rb)
    return name_b is not None and base_op(ra.get("op", "")) == base_op(name_b)


def tensor_args(record: TraceRecord) -> set[str]:
    return {t["a"] for t in record.get("in", ()) if t.get("fp") is not None or t.get("uninit")}


def inputs_mismatch(ra: TraceRecord, rb: TraceRecord, by_name: bool) -> bool:
    """Do corresponding inputs differ in dtype or shape (so they cannot be said to agree)?"""
    xs = [t for t in ra.get("in", ()) if t.get("fp") is not None]
    ys = [t for t in rb.get("in", ()) if t.get("fp") is not None]
    return len(xs) != len(ys) or any(ta["dt"] != tb["dt"] or ta["sh"] != tb["sh"] for ta, tb in pair_tensors(xs, ys, by_name))


def comparable_pair(ra: TraceRecord, rb: TraceRecord, tier: int, comparer: Comparer, by_name: bool) -> bool:
    """Is a pair from the aligner evidence enough to compare outputs?

    - Same op, called with different tensor arguments (inductor on CUDA calls
      `convolution` without its bias and adds the bias in a fused kernel): the
      outputs are different quantities. In-place and functional forms count as
      the same op (`add_` vs `add`): a compiled Adam step calls
      `denom.add(eps / -lr)` with a tensor where eager calls `denom.add_(eps)`.
    - Different ops paired on shapes alone: only a substitution (cos computed
      as sin) when both read values that were compared and agree.
    """
    if ra["t"] == OP and rb["t"] == OP and base_op(ra["op"]) == base_op(rb["op"]) and (
            tensor_args(ra) != tensor_args(rb) or inputs_mismatch(ra, rb, by_name)):
        return False  # the same op on other arguments, or on inputs of other shapes: other quantities
    if tier == SHAPE_TIER and not same_op(ra, rb):
        if rb["t"] == KERNEL:
            return (kernel_named_for(rb, ra) and not computes_past(rb, ra) and not only_copies_an_input(rb)
                    and not comparer.reads_the_output_of(rb, ra))
        substituted, compared_inputs = comparer.diffs("input", ra.get("in", []), rb.get("in", []), ra, by_name)
        return bool(compared_inputs) and not substituted
    return True


def fed_by_b_only(ra: TraceRecord, rb: TraceRecord, in_diffs: list[TensorDiff], b_side: BSideView, by_name: bool,
                   tolerance_of: Callable[[Tensor], Tolerance]) -> bool:
    """Was a differing input of B's record made by a record only B runs (e.g. an op a compiler pass
    inserted)? A dispatched op; a generated kernel only where B's record is a kernel too (one kernel
    per op) and the kernel computes an op A never computes at its line, or read A's very input (B
    computed it, then changed it): fusion leaves many kernels without a partner, and a compiled
    backward's same-shaped branches (the crossed pairs) are made by such kernels, of ops A runs
    there too, from other values. Where B's record is an op, a kernel counts when it read A's very input
    and wrote the same quantity computed otherwise (a pass's `mul` after a weight gradient's `mm`, fused
    into a kernel, the gradient then read by the eager optimizer)."""
    args = {d.arg for d in in_diffs}
    same_quantity = {d.arg for d in in_diffs if not far_apart([d])}
    kernels_count = rb["t"] == KERNEL

    def changes(made: Made, ta: Tensor) -> bool:
        if not made.only_b or made.moves:
            return False
        if made.kernel is None:
            return True
        read_a_value = (kernels_count or ta["a"] in same_quantity) and made.read(ta, tolerance_of(ta))
        return (kernels_count and made.foreign) or read_a_value

    for ta, tb in pair_tensors(ra.get("in", []), rb.get("in", []), by_name):
        made = b_side.producer(tb) if ta["a"] in args else None
        if made is None:
            continue
        # A record writing exactly what it read (a batch norm's weight of ones, bias of zeros) passes
        # a change on: look behind it, to the records B made the value with.
        if any(changes(m, ta) for m in (b_side.walk_back(tb) if made.moves else [made])):
            return True
    return False
