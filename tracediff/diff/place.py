"""Where a record is in a trace: op, index, source line, module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracediff.diff.compare import has_nonfinite
from tracediff.trace.schema import KERNEL, OP, REGION


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

    namespace, _, rest = op.partition("::")
    name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        overload_op = getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return False
    return torch.Tag.nondeterministic_seeded in overload_op.tags


def read_inputs(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The input tensors a record reads: not the `self` an initializer or copy_ overwrites whole,
    nor an out= buffer (the recorder keeps no fingerprint of those)."""
    ins = record.get("in", ())
    if record["t"] == OP and str(record.get("op", "")).split(".", 1)[0] in _OVERWRITES_SELF:
        return [t for t in ins if t.get("a") != "self"]
    return list(ins)


@dataclass(frozen=True, slots=True)
class Place:
    index: int
    op: str
    source: str | None
    module: str | None
    code: str | None = None
    path: str | None = None

    @classmethod
    def of(cls, record: dict[str, Any]) -> "Place":
        if record["t"] == REGION:
            name = f"region {record['ev']} {record['name']} (call {record['call']})"
        else:
            name = record.get("op") or record.get("name") or record["t"]
        return cls(record["i"], name, record.get("src"), record.get("m"), record.get("code"), record.get("path"))

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "index": self.index, "source": self.source, "module": self.module, "code": self.code}


# Outputs that hold Inf by design: fused attention's logsumexp ("1") is padded with
# Inf past the sequence length (CUDA's memory-efficient kernel rounds it up to 32).
_INF_BY_DESIGN = {
    "aten::_scaled_dot_product_efficient_attention": "1", "aten::_scaled_dot_product_flash_attention": "1",
    "aten::_scaled_dot_product_cudnn_attention": "1", "aten::_efficient_attention_forward": "1",
    "aten::_flash_attention_forward": "1",
}


def makes_nonfinite(record: dict[str, Any]) -> bool:
    """True when an op (or a generated kernel) produces NaN/Inf from finite inputs (a NaN origin)."""
    if record["t"] not in (OP, KERNEL) or record.get("nfs"):  # masked_fill(mask, -inf): Inf on purpose
        return False
    by_design = _INF_BY_DESIGN.get(str(record.get("op", "")).split(".", 1)[0]) if record["t"] == OP else None
    # Uninitialized memory may hold NaN bit patterns: that is garbage, not a NaN origin.
    if not any(has_nonfinite(t.get("fp")) and not t.get("uninit") and t.get("a") != by_design
               for t in record.get("out", ())):
        return False
    return not any(has_nonfinite(t.get("fp")) for t in read_inputs(record))
