"""A tensor as a record describes it: a stable id, the version naming its value, dtype, shape, device, fingerprint.

`TensorDescriber` keeps, per live tensor, an entry (weakly: it dies with its tensor): its id, the version it
was last fingerprinted at and that fingerprint (one read per value), the writes its version counter missed,
and the tensor whose storage and counter it shares without being a view. Views are described with their
base's id (`b`), so the diff's dataflow follows a write through a view to the base.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch

from tracediff.record.fingerprints.fingerprint import has_data, is_zero_tensor
from tracediff.record.identity import identity
from tracediff.record.spmd_args import placement_kind
from tracediff.record.storage_resizes import StorageResizes
from tracediff.record.tensor_table import TensorTable
from tracediff.trace.schema import Fingerprint

# Views' fingerprints kept at most (`TensorDescriber._view_fingerprint`).
_VIEW_FINGERPRINTS = 4096


def _alias_owner(entry: list) -> tuple[torch.Tensor | None, list | None]:
    """For a `detach`/`alias` result (`entry`: its `TensorDescriber.entry`): the tensor it was made from,
    if still alive, and that tensor's entry, kept after it died (a script saving `p.detach()` of weights
    whose model is gone by the time it reads them); (None, None) for a tensor of its own."""
    shared = entry[4]
    return (None, None) if shared is None else (shared[0](), shared[1])


class TensorDescriber:
    """Describes tensors for records (`describe`), remembering each live tensor's id and last fingerprint.

    `fingerprint` reads a tensor's fingerprint (the recorder's: on the host, or queued on the device).
    `resizes`: storages re-allocated outside the dispatcher, read as garbage until written.
    `spmd`: one rank of several, where a DTensor's placement is described too.
    """

    def __init__(self, fingerprint: Callable[[torch.Tensor], Fingerprint | None], resizes: StorageResizes,
                 spmd: bool) -> None:
        self._fingerprint = fingerprint
        self._resizes = resizes
        self._grown_storages = resizes.grown  # `resizes.pending`'s dict, tested per tensor without a property call
        self.spmd = spmd
        self._ids: TensorTable[list] = TensorTable()
        self._table = self._ids.data  # its dict, read directly by `describe`
        self._next_id = 0
        self.in_flight: set[int] = set()  # ids of functional collectives' outputs not yet waited for
        self._names: dict[torch.dtype | torch.device, str] = {}  # dtypes' and devices' names, worked out once
        # Fingerprints of views by (base's id, its version, the view's geometry and dtype): each call of a
        # Linear makes a fresh `t(weight)`, whose value is the same while the weight is unchanged.
        self._view_fingerprints: dict[tuple, Fingerprint | None] = {}
        # Generated kernels' buffers by storage (CUDA or not, device index, address): the storage, the first buffer
        # seen on it and that buffer's entry (see link_kernel_buffers).
        self._kernel_storages: dict[tuple[bool, int, int], tuple[weakref.ref, weakref.ref, list]] = {}

    @property
    def resizes(self) -> StorageResizes:
        return self._resizes

    @property
    def forget_callback(self) -> Any:
        """The tensor table's weak references' callback (run from whatever frame a tensor dies in)."""
        return self._ids.forget_callback

    def describe(self, arg: str, t: torch.Tensor, take_fingerprint: bool = True, mutated: bool = False,
                 written: bool = False, same_as: Fingerprint | None = None,
                 view_version: int | None = None) -> dict[str, Any]:
        """Metadata and fingerprint of one tensor.

        The recorded version `v` names one value of the tensor, for dataflow:
        torch's version counter plus the writes torch did not count.
        `mutated`: an op wrote `t` in place; autograd's ADInplaceOrView kernel
        bumps the counter only after this mode returns, so the value is filed
        under the coming version. `written`: generated code (an inductor
        kernel) wrote `t` behind the counter's back; count that write here.
        `same_as`: a fingerprint known to be `t`'s without reading it (a layout view).
        `view_version`: `t` is a view op's result, which becomes a view sharing its input's version counter once
        the op returns: that input's version as read (read later as a view, it is the same value).
        A view also names its base (`b`): a write through the view is a new value
        of the base's storage, which the diff's dataflow must follow. Views share
        their base's version counter, so the writes it missed are counted on the base.
        A functional collective's output is not read until `wait_tensor` completes it.
        """
        if t.is_nested:
            return self.describe_nested(arg, t, take_fingerprint, mutated or written)
        found = self._table.get(identity(t))  # `self._ids.get(t)`, inlined: every tensor of every op
        entry = found[1] if found is not None and found[0]() is t else self._new_entry(t)
        if take_fingerprint and self.in_flight and entry[0] in self.in_flight:
            take_fingerprint = False
        is_view = t._is_view()  # before `_base`: this runs for every tensor of every op
        if is_view or entry[4] is not None:
            owner, storage = self.storage(t, entry, is_view)
        else:  # the common case, inlined: a tensor of its own
            owner, storage = None, entry
        if written:
            storage[3] += 1
        if mutated or written:  # the program's value again, if it was garbage (or `empty`'s)
            garbage = False
            if self._resizes.watching_writes:  # only writes: a property call is cheap enough here
                self._resizes.written(t)
        else:
            garbage = bool(self._grown_storages) and self._reads_garbage(t, storage)
        # An alias shares its owner's counter only once the op making it has returned: read the owner's.
        try:
            version: int | None = (t if owner is None or is_view else owner)._version
        except RuntimeError:  # inference-mode tensors have no version counter
            version = None
        if version is not None:
            version += storage[3] + (1 if mutated else 0)
        if view_version is not None:
            version = view_version
        fp = None
        if take_fingerprint:
            if not (mutated or written) and version is not None and entry[1] == version:
                fp = entry[2]  # unchanged since last fingerprinted: one read per value
            elif same_as is not None:
                fp = same_as
                entry[1], entry[2] = version, fp
            elif is_view and owner is not None and version is not None and not (mutated or written):
                fp = self._view_fingerprint(t, storage[0], version)
                entry[1], entry[2] = version, fp
            else:
                fp = self._fingerprint(t)
                entry[1], entry[2] = version, fp
        dtype, device = t.dtype, t.device
        described = {"a": arg, "id": entry[0], "v": version, "dt": self._names.get(dtype) or self._name(dtype),
                     "sh": list(t.shape), "dev": self._names.get(device) or self._name(device), "fp": fp}
        if self.spmd and type(t).__name__ == "DTensor":
            described["pl"] = placement_kind(t)
        if storage is not entry:
            described["b"] = storage[0]
        if garbage:
            described["uninit"] = True
        return described

    def written_unseen(self, t: torch.Tensor) -> None:
        """Code the recorder does not see wrote `t` without moving its version counter (a CUDA graph's replay into
        its static outputs): its next read is a new value, fingerprinted again. A tensor never seen needs nothing."""
        entry = self._ids.get(t)
        if entry is not None:
            self.storage(t, entry)[1][3] += 1

    def cuda_written_unseen(self) -> None:
        """A CUDA graph replayed (one made with `torch.cuda.graph`): it may have written the memory of any CUDA tensor
        its capture wrote, which the recorder cannot tell apart, so every live CUDA tensor's next read is a new value."""
        for ref, _ in list(self._table.values()):
            t = ref()
            if t is not None and t.is_cuda:
                self.written_unseen(t)

    def unwritten(self, t: torch.Tensor) -> None:
        """`t` is `empty`'s memory: read its storage as garbage until ops have written all of it."""
        self._resizes.unwritten(t)

    def _reads_garbage(self, t: torch.Tensor, storage: list) -> bool:
        """Whether `t` is read from a storage re-allocated outside the dispatcher (FSDP2's `resize_`) and not
        written since, or an `empty` one partly written: garbage, and for a regrown one on its first read a new
        value the version counter never saw (counted on `storage`, the entry of the tensor owning it)."""
        counted = self._resizes.read(t)
        if counted is None:
            return False
        if not counted:
            storage[3] += 1
        return True

    def _name(self, key: torch.dtype | torch.device) -> str:
        """A dtype's name ("float32") or a device's ("cuda:0"), worked out once."""
        name = self._names[key] = str(key).removeprefix("torch.")
        return name

    def describe_nested(self, arg: str, t: torch.Tensor, take_fingerprint: bool, written: bool) -> dict[str, Any]:
        """A nested tensor (`torch.nested`, the fast path of `nn.TransformerEncoder` with a padding mask) by what can
        be read: its values buffer's shape and fingerprint, and its layout (`nt`). It has no single shape (a ragged
        dimension), and a strided one no `sizes` at all."""
        entry = self.entry(t)
        try:
            version: int | None = t._version + (1 if written else 0)
        except RuntimeError:
            version = None
        fp = None
        try:
            values = t.values()
        except RuntimeError:  # a layout without a values buffer to read: unknown, never the program's error
            values = None
        if take_fingerprint and values is not None:
            if not written and version is not None and entry[1] == version:
                fp = entry[2]
            else:
                fp = self._fingerprint(values.detach())
                entry[1], entry[2] = version, fp
        return {"a": arg, "id": entry[0], "v": version, "dt": str(t.dtype).removeprefix("torch."),
                "sh": [int(n) for n in values.shape] if values is not None else [], "dev": str(t.device), "fp": fp,
                "nt": str(t.layout).removeprefix("torch.")}

    def _view_fingerprint(self, t: torch.Tensor, base_id: int, version: int) -> Fingerprint | None:
        """A view's fingerprint, read once per value of its base and geometry: a view shares its base's
        version counter (and the writes it missed, counted on the base), and a base's id is never reused."""
        key = (base_id, version, t.shape, t.stride(), t.storage_offset(), t.dtype, t.is_conj(), t.is_neg())
        if key in self._view_fingerprints:
            return self._view_fingerprints[key]
        if len(self._view_fingerprints) >= _VIEW_FINGERPRINTS:  # most are of values gone by: start afresh
            self._view_fingerprints.clear()
        fp = self._view_fingerprints[key] = self._fingerprint(t)
        return fp

    def storage(self, t: torch.Tensor, entry: list, is_view: bool | None = None) -> tuple[torch.Tensor | None, list]:
        """The tensor whose storage and version counter `t` shares (a view's base, what a `detach` or
        `alias` result was made from; None for a tensor of its own, or one whose owner died: it still
        shares the counter) and the entry keeping that storage's id and the writes its counter missed.
        `is_view`: `t._is_view()`, where the caller has it."""
        if t._is_view() if is_view is None else is_view:
            base = t._base
            if base is not None:
                return base, self.entry(base)
        owner, owner_entry = _alias_owner(entry)
        return owner, entry if owner_entry is None else owner_entry

    def entry(self, t: torch.Tensor) -> list:
        """The tensor's [id, version fingerprinted at, fingerprint, writes the counter missed, alias of]:
        a `detach`/`alias` result shares another tensor's storage and version counter without being a
        view (no `_base`), so a write to either is a new value of both; the last entry holds that tensor
        (weakly) and its entry, or None."""
        entry = self._ids.get(t)
        return self._new_entry(t) if entry is None else entry

    def _new_entry(self, t: torch.Tensor) -> list:
        """File `t`, not in the table, under a new id (`entry`)."""
        entry = [self._next_id, None, None, 0, None]
        self._next_id += 1
        self._ids.set(t, entry)
        return entry

    def file_alias(self, result: torch.Tensor, source: torch.Tensor) -> None:
        """`result` of a `detach`/`alias` of `source` shares its storage and version counter (`_alias_owner`)."""
        owner, storage = self.storage(source, self.entry(source))
        self.entry(result)[4] = (weakref.ref(source if owner is None else owner), storage)

    def link_kernel_buffers(self, tensors: Iterable[torch.Tensor]) -> None:
        """Generated code reinterprets one buffer as several tensors (inductor's `reinterpret_tensor`: two
        kernels each write half of a `cat`'s buffer, a third reads it whole), aliases torch knows nothing
        of (no `_base`). File each such tensor as an alias of the first kernel buffer seen on its storage,
        as a `detach` result is, so that a write through one is a new value of the others (`describe`'s
        `b`) and the diff's dataflow follows it. That buffer may be gone (generated code deletes each
        alias after its kernel) while its storage lives on."""
        for t in tensors:
            entry = self._ids.get(t)
            if entry is not None and entry[4] is not None:
                continue  # filed as an alias already
            if t._is_view() or not has_data(t) or is_zero_tensor(t):
                continue
            if entry is None:
                entry = self.entry(t)
            storage = t.untyped_storage()
            key = (t.is_cuda, t.get_device(), storage.data_ptr())
            seen = self._kernel_storages.get(key)
            if seen is None or seen[0]() is not storage:  # a new storage (or the allocator reused the memory)
                self._kernel_storages[key] = (weakref.ref(storage), weakref.ref(t), entry)
            elif seen[2] is not entry:
                entry[4] = (seen[1], seen[2])
                entry[1] = None  # its versions count on the owner's storage from now on: fingerprint anew
