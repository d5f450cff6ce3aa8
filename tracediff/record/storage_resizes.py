"""Storage a program re-allocates outside the dispatcher: garbage until an op writes it.

FSDP2 frees an unsharded parameter between uses with `untyped_storage().resize_(0)`
and re-allocates it with `resize_(n)` before the next all-gather copies into it.
Neither is a dispatched op and neither moves the version counter, so a read in
between (FSDP2 views the parameter as the all-gather's `out=` buffer) would be
taken for the value last written, and its garbage compared between runs. While
active, `StorageResizes` wraps `torch.UntypedStorage.resize_` and remembers every
storage that grew; the recorder reads such a storage as uninitialized memory, a new
value, until an op writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class StorageResizes:
    """Context manager: which storages grew (`resize_` to more bytes) and were not written since."""

    def __init__(self, before_resize: Callable[[], None] = lambda: None) -> None:
        # Called before every resize: work queued on the old memory must be launched before it is freed.
        self._before_resize = before_resize
        # Storages that grew, by their StorageImpl's address (shared by every view and Python wrapper of
        # it): whether the recorder has counted the new value yet. Empty (`pending` False) almost always: the
        # recorder tests the dict itself per tensor; it is never replaced, only changed.
        self.grown: dict[int, bool] = {}
        self._original: Any = None
        self._owned_attribute = False  # the class had no `resize_` of its own: delete ours on exit

    def __enter__(self) -> StorageResizes:
        cls = torch.UntypedStorage
        self._owned_attribute = "resize_" not in cls.__dict__
        original = self._original = cls.resize_
        grown = self.grown
        before_resize = self._before_resize

        def resize_(storage: torch.UntypedStorage, size: int) -> Any:
            before_resize()
            before = storage.nbytes()
            result = original(storage, size)
            if size > before:
                grown[storage._cdata] = False
            return result

        cls.resize_ = resize_  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._original is None:
            return
        if self._owned_attribute:
            del torch.UntypedStorage.resize_
        else:
            torch.UntypedStorage.resize_ = self._original  # type: ignore[method-assign]
        self._original = None
        self.grown.clear()

    @property
    def pending(self) -> bool:
        """Whether any storage is garbage now: the recorder's fast path asks only this."""
        return bool(self.grown)

    def read(self, t: torch.Tensor) -> bool | None:
        """For a tensor about to be read: None when its storage holds what ops wrote; else whether this is the
        first read since the storage grew (False) or a later one (True), so the recorder counts one new value."""
        key = _storage_key(t)
        if key is None or key not in self.grown:
            return None
        counted = self.grown[key]
        self.grown[key] = True
        return counted

    def written(self, t: torch.Tensor) -> None:
        """An op wrote `t`: its storage holds the program's values again."""
        key = _storage_key(t)
        if key is not None:
            self.grown.pop(key, None)


def _storage_key(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # no storage (a wrapper subclass, a sparse tensor)
        return None
