"""Storage a program re-allocates outside the dispatcher, or fills a part at a time: garbage until ops write it.

FSDP2 frees an unsharded parameter between uses with `untyped_storage().resize_(0)`
and re-allocates it with `resize_(n)` before the next all-gather copies into it.
Neither is a dispatched op and neither moves the version counter, so a read in
between (FSDP2 views the parameter as the all-gather's `out=` buffer) would be
taken for the value last written, and its garbage compared between runs. While
active, `StorageResizes` wraps `torch.UntypedStorage.resize_` and remembers every
storage that grew; the recorder reads such a storage as uninitialized memory, a new
value, until an op writes it.

`empty` makes garbage too, which its output's `uninit` marks; but a program may fill it a slice at a time
(CPU's `affine_grid` writes each channel of an `empty` base grid through a `select`), and a read of the whole
base in between reads the allocator's leftovers in the channels not written yet, which differ between runs
and mean nothing. So an `empty` storage (`unwritten`) once partly written is read as garbage too, until
writes through its views have covered all its bytes; unlike a regrown one, it is no new value the version
counter missed.

`deepcopy` of a tensor (of a model: an EMA or SWA copy, `AveragedModel`) allocates a new storage outside the
dispatcher and fills it with the storage's own `copy_`, which views both storages as byte tensors (`set_`) and
copies: the view of the new one holds the allocator's leftovers, which differ between runs. While such a `copy_`
runs, its destination is `being_filled`, and the recorder marks a `set_` onto it uninitialized.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch


class _PartlyWritten:
    """An `empty` storage's bytes not yet written, counted by the views written (each once: an in-place op's
    output is its input, seen twice)."""

    def __init__(self, nbytes: int) -> None:
        self.unwritten = nbytes
        self._views: set[tuple] = set()

    def write(self, t: torch.Tensor) -> bool:
        """`t`, a view of the storage, was written: True once every byte has been."""
        view = (t.storage_offset(), t.dtype, tuple(t.shape), t.stride())
        if view not in self._views:
            self._views.add(view)
            self.unwritten -= t.numel() * t.element_size()
        return self.unwritten <= 0


class StorageResizes:
    """Context manager: which storages grew (`resize_` to more bytes) and were not written since."""

    def __init__(self, before_resize: Callable[[], None] = lambda: None) -> None:
        # Called before every resize: work queued on the old memory must be launched before it is freed.
        self._before_resize = before_resize
        # Storages that grew, by their StorageImpl's address (shared by every view and Python wrapper of
        # it): whether the recorder has counted the new value yet; and `empty` storages partly written (`unwritten`).
        # Empty (`pending` False) almost always: the recorder tests the dict itself per tensor; it is never
        # replaced, only changed.
        self.grown: dict[int, bool | _PartlyWritten] = {}
        # `empty` storages not written at all, by address: their size. Not garbage to read yet (the `empty`'s own
        # value, which the diff follows), so kept out of `grown`, which the recorder tests on every read; only
        # writes look here, and the first partial one moves the storage to `grown`.
        self.fresh: dict[int, int] = {}
        # The storage a storage's own `copy_` is filling whole now (its StorageImpl's address), or None.
        self.filling: int | None = None
        # UntypedStorage's methods replaced while active: (name, the original, or None where the class had none of
        # its own and ours is deleted on exit). Empty when not active.
        self._replaced: list[tuple[str, Any]] = []

    def __enter__(self) -> StorageResizes:
        self._replace("resize_", self._watching_resizes)
        self._replace("copy_", self._watching_copies)
        return self

    def _replace(self, name: str, wrap: Callable[[Any], Any]) -> None:
        """UntypedStorage's method `name` becomes `wrap(original)` until exit."""
        cls = torch.UntypedStorage
        original = getattr(cls, name)
        self._replaced.append((name, original if name in cls.__dict__ else None))
        setattr(cls, name, wrap(original))

    def _watching_resizes(self, original: Callable[..., Any]) -> Callable[..., Any]:
        grown = self.grown
        before_resize = self._before_resize

        def resize_(storage: torch.UntypedStorage, size: int) -> Any:
            before_resize()
            before = storage.nbytes()
            result = original(storage, size)
            if size > before:
                grown[storage._cdata] = False
            return result

        return resize_

    def _watching_copies(self, original: Callable[..., Any]) -> Callable[..., Any]:
        resizes = self

        def copy_(storage: torch.UntypedStorage, source: Any, *args: Any, **kwargs: Any) -> Any:
            outer, resizes.filling = resizes.filling, storage._cdata
            try:
                return original(storage, source, *args, **kwargs)
            finally:
                resizes.filling = outer

        return copy_

    def being_filled(self, t: torch.Tensor) -> bool:
        """Whether `t` views a storage that a storage's own `copy_` is filling whole now (the class's doc)."""
        return self.filling is not None and _storage_key(t) == self.filling

    def __exit__(self, *exc: object) -> None:
        while self._replaced:
            name, original = self._replaced.pop()
            if original is None:
                delattr(torch.UntypedStorage, name)
            else:
                setattr(torch.UntypedStorage, name, original)
        self.filling = None
        self.grown.clear()
        self.fresh.clear()

    @property
    def pending(self) -> bool:
        """Whether any storage is garbage now: the recorder's fast path asks only this."""
        return bool(self.grown)

    @property
    def watching_writes(self) -> bool:
        """Whether a write may change what is garbage (`written`): a storage is garbage or `empty`'s, unwritten."""
        return bool(self.grown) or bool(self.fresh)

    def unwritten(self, t: torch.Tensor) -> None:
        """`t` is an `empty` op's output: read its storage as garbage until writes have covered it, or `t` dies (its
        storage may outlive it in a view, but must not outlive the entry: the address would be used again)."""
        key = _storage_key(t)
        if key is None or not self._replaced:
            return
        nbytes = t.untyped_storage().nbytes()
        if nbytes:
            grown, fresh = self.grown, self.fresh
            fresh[key] = nbytes
            weakref.finalize(t, lambda: (grown.pop(key, None), fresh.pop(key, None)))

    def read(self, t: torch.Tensor) -> bool | None:
        """For a tensor about to be read: None when its storage holds what ops wrote; else whether this is the
        first read since the storage grew (False) or a later one, or of an `empty` storage partly written (True), so
        the recorder counts one new value for a regrown storage."""
        key = _storage_key(t)
        if key is None:
            return None
        state = self.grown.get(key)
        if state is None:
            return None
        if isinstance(state, _PartlyWritten):
            return True  # what is read mixes values with leftovers
        self.grown[key] = True
        return state

    def written(self, t: torch.Tensor) -> None:
        """An op wrote `t`: a regrown storage holds the program's values again; an `empty` one, once every byte
        has been written."""
        key = _storage_key(t)
        if key is None:
            return
        nbytes = self.fresh.pop(key, None)
        if nbytes is not None:
            first = _PartlyWritten(nbytes)
            if not first.write(t):
                self.grown[key] = first
            return
        state = self.grown.get(key)
        if state is not None and (not isinstance(state, _PartlyWritten) or state.write(t)):
            del self.grown[key]


def _storage_key(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # no storage (a wrapper subclass, a sparse tensor)
        return None
