"""Where a record is in a trace: op, index, source line, module."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from tracediff.diff.compare import has_nonfinite
from tracediff.op_names import packet, parts
from tracediff.trace.schema import KERNEL, OP, REGION, Tensor, TraceRecord

# In-place ops that write every element of `self` without reading it: initializers
# (`nn.init.*`) and copies. What `self` held before (often uninitialized memory
# from `torch.empty`, which may hold NaN/Inf bit patterns) is not read.
_OVERWRITES_SELF = frozenset({
    "aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_", "aten::random_", "aten::exponential_",
    "aten::cauchy_", "aten::log_normal_", "aten::geometric_", "aten::bernoulli_", "aten::copy_",
})


def draws_random(op: str) -> bool:
    """Does torch tag this op `nondeterministic_seeded` (it draws from a generator: dropout, sampling,
    fused attention with dropout)?"""
    import torch

    namespace, name, overload = parts(op)
    try:
        overload_op = getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError):
        return False
    return torch.Tag.nondeterministic_seeded in overload_op.tags


def _packet(record: TraceRecord) -> str:
    return packet(str(record.get("op", "")))


def _lifts_scalar(record: TraceRecord) -> bool:
    """`torch.tensor(float("-inf"))`: a 0-dim tensor built from a Python number, which the
    dispatcher first sees when `lift_fresh` lifts it. A scalar constant of the script, as a
    scalar argument is."""
    return (record["t"] == OP and _packet(record) in ("aten::lift_fresh", "aten::lift_fresh_copy")
            and all(t.get("sh") == [] for t in record.get("in", ())))


def read_inputs(record: TraceRecord) -> list[Tensor]:
    """The input tensors a record reads: not the `self` an initializer or copy_ overwrites whole,
    nor an out= buffer (the recorder keeps no fingerprint of those), nor the Python number that
    `torch.tensor(x)` lifts (it is written in the script, not read from outside)."""
    ins = record.get("in", ())
    if _lifts_scalar(record):
        return []
    if record["t"] == OP and _packet(record) in _OVERWRITES_SELF:
        return [t for t in ins if t.get("a") != "self"]
    return list(ins)


def writes_nonfinite_constant(record: TraceRecord) -> bool:
    """Does the record write a NaN/Inf constant on purpose: an op with a non-finite scalar argument
    (`masked_fill(mask, -inf)`, `full((n, n), -inf)`: `nfs`), `torch.tensor(-inf)`, or a generated
    kernel fusing such an op (a causal mask built inside the kernel)? Its NaN/Inf outputs may be
    that constant, so it is no NaN origin. Kept coarse on purpose: a kernel that both writes a mask
    and overflows elsewhere is not told apart (the unfused ops would be)."""
    if record.get("nfs") or _lifts_scalar(record):
        return True
    return record["t"] == KERNEL and any(op.get("nfs") for op in record.get("fuses") or ())


def interned(text: str | None) -> str | None:
    """`text` interned: the walk keeps many records' names and lines, of which a trace has few."""
    return sys.intern(text) if text else text


@dataclass(frozen=True, slots=True)
class Place:
    index: int
    op: str
    source: str | None
    module: str | None
    code: str | None = None
    path: str | None = None

    @classmethod
    def of(cls, record: TraceRecord) -> Place:
        if record["t"] == REGION:
            name = f"region {record['ev']} {record['name']} (call {record['call']})"
        else:
            name = record.get("op") or record.get("name") or record["t"]
        # Interned: the walk keeps hundreds of thousands of places, and a trace has few distinct lines and names.
        return cls(record["i"], sys.intern(name), interned(record.get("src")), interned(record.get("m")),
                   interned(record.get("code")), interned(record.get("path")))

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "index": self.index, "source": self.source, "module": self.module, "code": self.code}

    @property
    def at(self) -> str:
        """` at file.py:12`, or nothing where the source is unknown (a region's record, torch's own code)."""
        return f" at {self.source}" if self.source else ""


# Outputs that hold Inf by design: fused attention's logsumexp ("1") is padded with
# Inf past the sequence length (CUDA's memory-efficient kernel rounds it up to 32).
_INF_BY_DESIGN = {
    "aten::_scaled_dot_product_efficient_attention": "1", "aten::_scaled_dot_product_flash_attention": "1",
    "aten::_scaled_dot_product_cudnn_attention": "1", "aten::_efficient_attention_forward": "1",
    "aten::_flash_attention_forward": "1",
}


def makes_nonfinite(record: TraceRecord) -> bool:
    """True when an op (or a generated kernel) produces NaN/Inf from finite inputs (a NaN origin)."""
    if record["t"] not in (OP, KERNEL):
        return False
    # Uninitialized memory may hold NaN bit patterns: that is garbage, not a NaN origin. (Outputs first: every
    # record of a trace is asked, and almost none has NaN or Inf.)
    nonfinite = [t for t in record.get("out", ()) if has_nonfinite(t.get("fp")) and not t.get("uninit")]
    if not nonfinite or writes_nonfinite_constant(record):  # a mask's -inf: on purpose
        return False
    by_design = _INF_BY_DESIGN.get(_packet(record)) if record["t"] == OP else None
    if not any(t.get("a") != by_design for t in nonfinite):
        return False
    return not any(has_nonfinite(t.get("fp")) for t in read_inputs(record))
