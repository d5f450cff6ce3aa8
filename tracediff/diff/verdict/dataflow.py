"""Values as the walk back keys them: (tensor id, version), read maybe through a view (base id), and
bounded tables of their producers.

A view shares its base's storage and version counter, so a write through it (`v[idx] = x` with
`v = h.view(-1)`) is also the base's value at that version, and a view read after its base was
written resolves to that write.
"""

from __future__ import annotations

import marshal
import struct
from collections import OrderedDict
from typing import Any, cast

from tracediff.diff.value_keys import Key, id_and_version, key_of
from tracediff.trace.schema import KERNEL, Fingerprint, Tensor, TraceRecord

# Bounds: producers remembered for the walk back, nodes visited per walk,
# echoes counted before pass 2 stops reading.
_PRODUCER_WINDOW = 200_000


WALK_LIMIT = 10_000


Ref = tuple[int, Any, Any]  # (tensor id, version, base id or None): a value read, maybe through a view


def value_key(t: Tensor) -> Key:
    return key_of(t["id"], t.get("v"))


def content_of(t: Tensor) -> Content | None:
    """A tensor's content as its fingerprint states it: exact in what no order of summation changes (dtype,
    element count, max), to 7 digits in its sums, which a reinterpreting view (a transposed
    `reinterpret_tensor` of a kernel's buffer) sums in another order; None where it says too little to
    tell values apart (no fingerprint, all zeros, no max, a NaN, which equals nothing)."""
    fp = t.get("fp")
    if not fp or not fp.get("l1"):
        return None
    l1, largest = fp["l1"], fp.get("max")
    if largest is None:
        return None
    # + 0.0: -0.0 and 0.0 are one value, and must be one packing.
    ratio = round(fp.get("sum", 0.0) / l1, _CONTENT_DIGITS) + 0.0
    l1, l2 = float(f"{l1:.{_CONTENT_DIGITS}g}") + 0.0, float(f"{fp.get('l2', 0.0):.{_CONTENT_DIGITS}g}") + 0.0
    if largest != largest or ratio != ratio or l1 != l1 or l2 != l2:
        return None
    return f"{t.get('dt')}:{fp.get('n')}:".encode() + _CONTENT_SUMS.pack(largest + 0.0, ratio, l1, l2)


# A content, packed: its dtype and element count as text, then its four sums as doubles. Equal contents pack
# alike; as a tuple it took 7 objects (about 270 bytes) per value in the walk's tables, packed one (about 90).
Content = bytes
_CONTENT_SUMS = struct.Struct("<4d")


# Digits of a content's sums that a reordered summation keeps (float32 sums in float64 pairwise: ~1e-7).
_CONTENT_DIGITS = 7


# A tensor a table keeps whole for a later rule (a candidate's outputs, what an op only B runs read), packed
# (`pack`): as parsed, its dict, strings and fingerprint's floats took about 900 bytes, packed about 330, and a
# real trace's tables keep up to hundreds of thousands (GPT-2's 2,000 AdamW steps: the walk's peak 1.2 GB).
PackedTensor = bytes
# What the rules read of a kept tensor: its dtype, shape, device and fingerprint.
_KEPT_FIELDS = ("dt", "sh", "dev", "fp")


def pack(t: Tensor) -> PackedTensor:
    return marshal.dumps({k: t[k] for k in _KEPT_FIELDS if k in t})  # type: ignore[literal-required]


def unpack(packed: PackedTensor) -> Tensor:
    """The tensor `pack` kept (its fields `_KEPT_FIELDS`), parsed again: a new dict each time."""
    return cast(Tensor, marshal.loads(packed))


def fingerprint_of(t: Tensor) -> Fingerprint:
    """`t`'s fingerprint, where the caller knows it has one (compared, or kept for having one)."""
    fp = t["fp"]
    assert fp is not None
    return fp


def ref_to(key: Key) -> Ref:
    """A read of exactly the value `key` (not through a view)."""
    tensor_id, version = id_and_version(key)
    return tensor_id, version, None


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
        return key, key_of(base, version)
    return (key,)  # a view op's new view: the base's value is unchanged


def resolve(ref: Ref, *tables: OrderedDict) -> Key:
    """The key of a value read: its own if known, else the last write to its base's storage
    at that version (a view read after its base, or another view of it, was written)."""
    key = key_of(ref[0], ref[1])
    if ref[2] is None or ref[1] is None:
        return key
    for table in tables:  # a loop, not any() over a generator: this runs several times per record of a diff
        if key in table:
            return key
    return key_of(ref[2], ref[1])


# Views followed from a value back to the one it shows (a view of a transpose of a reshape ...).
VIEW_CHAIN_LIMIT = 8


def put_bounded(table: OrderedDict, key: Key | Content, value: Any) -> None:
    """Insert as newest; drop the oldest entry past the producer window."""
    table.pop(key, None)
    table[key] = value
    if len(table) > _PRODUCER_WINDOW:
        table.popitem(last=False)
