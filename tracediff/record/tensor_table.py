"""A map from live tensors to values, held weakly: the recorder's tensor -> entry table.

torch's WeakTensorKeyDictionary builds a key object per lookup and compares
keys through Python methods: about five Python calls per lookup, and the
recorder looks tensors up several times per op. Here a lookup is one dict
get by `identity(t)` (record/identity.py: `id(t)` without its audit event)
and one weak reference call. An entry leaves when its tensor dies (the weak
reference's callback), before its identity can be reused; the check that the
reference still points at `t` guards against an identity reused all the same.
"""

from __future__ import annotations

import weakref
from typing import Any, Generic, TypeVar

import torch

from tracediff.record.identity import identity

V = TypeVar("V")


class TensorTable(Generic[V]):
    """`get(t)` / `set(t, value)` for tensors, without keeping them alive."""

    def __init__(self) -> None:
        data: dict[int, tuple[weakref.ref, V]] = {}
        self._data = data

        def forget(ref: weakref.ref, data: dict[int, tuple[weakref.ref, Any]] = data) -> None:
            key: int = getattr(ref, "key", -1)
            found = data.get(key)
            if found is not None and found[0] is ref:
                del data[key]

        self._forget = forget

    @property
    def data(self) -> dict[int, tuple[weakref.ref, V]]:
        """identity(t) -> (weak reference to t, value): for a caller that inlines `get` (the reference must be `t`)."""
        return self._data

    @property
    def forget_callback(self) -> Any:
        """The weak references' callback (run by the garbage collector, from whatever frame a tensor dies in)."""
        return self._forget

    def get(self, t: torch.Tensor) -> V | None:
        found = self._data.get(identity(t))
        if found is not None and found[0]() is t:
            return found[1]
        return None

    def set(self, t: torch.Tensor, value: V) -> None:
        ref = _KeyedRef(t, self._forget)
        ref.key = identity(t)
        self._data[ref.key] = (ref, value)


class _KeyedRef(weakref.ref):
    """A weak reference that knows the table key it was filed under (for its callback)."""

    __slots__ = ("key",)
    key: int
