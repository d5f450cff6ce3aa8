"""Values as the walk back keys them: (tensor id, version), read maybe through a view (base id), and
bounded tables of their producers.

A view shares its base's storage and version counter, so a write through it (`v[idx] = x` with
`v = h.view(-1)`) is also the base's value at that version, and a view read after its base was
written resolves to that write.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from tracediff.trace.schema import KERNEL, Fingerprint, Tensor, TraceRecord

# Bounds: producers remembered for the walk back, nodes visited per walk,
# echoes counted before pass 2 stops reading.
_PRODUCER_WINDOW = 200_000


WALK_LIMIT = 10_000


Key = tuple[int, Any]  # (tensor id, version): one value of one tensor


Ref = tuple[int, Any, Any]  # (tensor id, version, base id or None): a value read, maybe through a view


def value_key(t: Tensor) -> Key:
    return t["id"], t.get("v")


def content_of(t: Tensor) -> tuple | None:
    """A tensor's content as its fingerprint states it: exact in what no order of summation changes (dtype,
    element count, max), to 7 digits in its sums, which a reinterpreting view (a transposed
    `reinterpret_tensor` of a kernel's buffer) sums in another order; None where it says too little to
    tell values apart (no fingerprint, all zeros)."""
    fp = t.get("fp")
    if not fp or not fp.get("l1"):
        return None
    l1 = fp["l1"]
    return (t.get("dt"), fp.get("n"), fp.get("max"), round(fp.get("sum", 0.0) / l1, _CONTENT_DIGITS),
            float(f"{l1:.{_CONTENT_DIGITS}g}"), float(f"{fp.get('l2', 0.0):.{_CONTENT_DIGITS}g}"))


# Digits of a content's sums that a reordered summation keeps (float32 sums in float64 pairwise: ~1e-7).
_CONTENT_DIGITS = 7


def fingerprint_of(t: Tensor) -> Fingerprint:
    """`t`'s fingerprint, where the caller knows it has one (compared, or kept for having one)."""
    fp = t["fp"]
    assert fp is not None
    return fp


def value_ref(t: Tensor) -> Ref:
    return t["id"], t.get("v"), t.get("b")


def reads_of(record: TraceRecord) -> tuple[Ref, ...]:
    return tuple(value_ref(t) for t in record.get("in", ()) if t.get("fp") is not None or t.get("uninit"))


def filed_keys(record: TraceRecord, t: Tensor) -> tuple[Key, ...]:
    """The keys an output of `record` is a value of: its own, and its base's when the record wrote
    it through a view (in place, out=, a kernel's buffer). A view shares its base's version
    counter, so `v[idx] = x` makes a new value of the base at the same version."""
    key = value_key(t)
    base, version = t.get("b"), t.get("v")
    if base is None or version is None:
        return (key,)
    if record["t"] == KERNEL or any(x["id"] == t["id"] for x in record.get("in", ())):
        return key, (base, version)
    return (key,)  # a view op's new view: the base's value is unchanged


def resolve(ref: Ref, *tables: OrderedDict) -> Key:
    """The key of a value read: its own if known, else the last write to its base's storage
    at that version (a view read after its base, or another view of it, was written)."""
    key = ref[:2]
    if ref[2] is None or ref[1] is None:
        return key
    for table in tables:  # a loop, not any() over a generator: this runs several times per record of a diff
        if key in table:
            return key
    return ref[2], ref[1]


# Views followed from a value back to the one it shows (a view of a transpose of a reshape ...).
VIEW_CHAIN_LIMIT = 8


def put_bounded(table: OrderedDict, key: Key, value: Any) -> None:
    """Insert as newest; drop the oldest entry past the producer window."""
    table.pop(key, None)
    table[key] = value
    if len(table) > _PRODUCER_WINDOW:
        table.popitem(last=False)
