"""An op's outputs as its record lists them.

The tensors it returned; the tensors it wrote in place without returning them (a multi-tensor optimizer step);
a collective's outputs still in flight (listed for dataflow, not read); and which of them are uninitialized
memory or a kernel's scratch (never compared).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tracediff.record.identity import identity
from tracediff.record.op_arguments import TensorArgument, tensor_version
from tracediff.record.op_info import OpInfo
from tracediff.record.tensor_describer import TensorDescriber
from tracediff.trace.schema import Fingerprint

# Whether a tensor shares another's storage (a view op that returned a view, not a copy or a new tensor): torch's
# function itself, not a Python wrapper (a frame per view op).
_is_alias_of: Callable[[torch.Tensor, torch.Tensor], bool] = torch._C._is_alias_of  # type: ignore[attr-defined]


def describe_outputs(tensors: TensorDescriber, info: OpInfo, tensor_args: list[TensorArgument],
                     inputs: list[dict[str, Any]], returned: list[tuple[str, torch.Tensor]],
                     written: dict[int, int | None], same_as: Fingerprint | None) -> list[dict[str, Any]]:
    """The outputs of an op that has run. `inputs`: its inputs as described before it ran; `returned`: the tensors
    it returned (op_arguments.py's `output_tensors`); `written`: the versions, before the op, of the tensors it
    writes, by identity; `same_as`: a layout view's fingerprint, its input's."""
    if info.collective == "wait":  # `wait_tensor` completed a functional collective: its outputs can be read
        tensors.in_flight.difference_update(tensors.entry(t)[0] for _, t in returned)
    if info.collective in ("work", "functional"):
        outputs = _pending_collective_outputs(tensors, info, returned, {identity(t) for _, t, _, _ in tensor_args})
    elif info.returns_views and not info.reorders and tensor_args and inputs[0]["v"] is not None:
        # Not a transpose: its statistics come without their sketch (`same_as`), which its first read
        # as a view takes.
        source, version = tensor_args[0][1], inputs[0]["v"]
        outputs = [tensors.describe(name, t, same_as=same_as, view_version=version if _is_alias_of(t, source) else None)
                   for name, t in returned]
    else:
        outputs = [tensors.describe(name, t, mutated=identity(t) in written, same_as=same_as) for name, t in returned]
    if written:
        outputs += _unreturned_writes(tensors, tensor_args, {identity(t) for _, t in returned}, written)
    if info.uninitialized or info.scratch_outputs:
        for out in outputs:
            if info.uninitialized or out["a"] in info.scratch_outputs:
                out["uninit"] = True
    if info.uninitialized:
        for _, t in returned:
            tensors.unwritten(t)  # garbage until written whole, however many ops that takes
    if info.sets_storage and returned and tensors.resizes.being_filled(returned[0][1]):
        outputs[0]["uninit"] = True  # a fresh storage its own `copy_` is about to fill whole: garbage until then
    return outputs


def _pending_collective_outputs(tensors: TensorDescriber, info: OpInfo, returned: list[tuple[str, torch.Tensor]],
                                arguments: set[int]) -> list[dict[str, Any]]:
    """The outputs of a collective still in flight: listed for dataflow, not read (a background thread
    or the network may be writing them). A tensor the collective writes in place (an argument it
    returns) gets a new value the version counter does not count, so the op that reads it after the
    wait reads (and fingerprints) the new value, not the one the collective was given."""
    outputs = [dict(tensors.describe(name, t, take_fingerprint=False, written=identity(t) in arguments), unread=True)
               for name, t in returned]
    if info.collective == "functional":  # in flight until `wait_tensor` returns it
        tensors.in_flight.update(out["id"] for out in outputs)
    return outputs


def _unreturned_writes(tensors: TensorDescriber, tensor_args: list[TensorArgument], returned: set[int],
                       versions_before: dict[int, int | None]) -> list[dict[str, Any]]:
    """An in-place multi-tensor op (AdamW's `_foreach_addcdiv_`, `_fused_adamw_`, `_fused_sgd_`) returns
    nothing: describe each tensor it wrote as an output, fingerprinted as the values it leaves, so the diff
    compares the update where it was made (the next read of a weight finds that fingerprint filed under
    its version: no second read). Where torch did not bump the tensor's counter under the dispatch mode
    (CPU's foreach ops), count the write, so a later read is a new value; where it did (CUDA's foreach
    kernels bump it themselves), the counter already names the new value."""
    written = []
    for name, t, is_written, _ in tensor_args:
        if is_written and identity(t) not in returned:
            counted = tensor_version(t) != versions_before[identity(t)]
            written.append(tensors.describe(name, t, written=not counted))
    return written
