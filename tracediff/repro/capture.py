"""Keep the arguments of chosen ops while the reference run is re-recorded.

The re-run uses the same recorder (so record indices match the original
trace) with one addition: when the op about to be recorded has a chosen
index, its arguments are cloned before it runs. A tensor argument that is the
unchanged output of an earlier chosen op is kept as a reference to that op
instead of a copy, so the repro replays the chain's dataflow, not just values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_map_only

from tracediff.record.mode import TraceRecorder
from tracediff.trace.writer import TraceWriter

CAPTURE_FORMAT = 1


@dataclass(frozen=True)
class OutputRef:
    """A tensor argument that is output `position` (None: the whole result) of the replayed op recorded at `index`."""

    index: int
    position: int | None


class ArgumentCapture:
    """Clones the arguments of the ops recorded at `indices`; `save` writes them with torch.save."""

    def __init__(self, indices: set[int]) -> None:
        self.indices = indices
        self.ops: list[dict[str, Any]] = []
        # id(tensor) -> (tensor, its version when produced, OutputRef): outputs of captured ops.
        self._produced: dict[int, tuple[torch.Tensor, int, OutputRef]] = {}

    def recorder(self, writer: TraceWriter, exact: bool) -> TraceRecorder:
        return _CapturingRecorder(writer, exact=exact, capture=self)

    def keep_arguments(self, args: Any) -> Any:
        """`args` with each tensor cloned (or replaced by an OutputRef), other values as they are."""
        return tree_map_only(torch.Tensor, self._keep_tensor, args)

    def _keep_tensor(self, t: torch.Tensor) -> torch.Tensor | OutputRef:
        known = self._produced.get(id(t))
        if known is not None and known[0] is t and t._version == known[1]:
            return known[2]
        return t.detach().clone()

    def add(self, index: int, func: Any, args: Any, kwargs: Any, result: Any) -> None:
        # str(OpOverload): `aten.cos.default`, its torch.ops path, which the repro script calls
        self.ops.append({"index": index, "op": str(func), "args": args, "kwargs": kwargs})
        outputs = [(None, result)] if isinstance(result, torch.Tensor) else (
            list(enumerate(result)) if isinstance(result, (list, tuple)) else [])
        for position, value in outputs:
            if isinstance(value, torch.Tensor):
                self._produced[id(value)] = (value, value._version, OutputRef(index, position))

    def save(self, path: str) -> None:
        torch.save({"format": CAPTURE_FORMAT, "ops": self.ops}, path)


class _CapturingRecorder(TraceRecorder):
    """The trace recorder, plus argument capture for the chosen record indices."""

    def __init__(self, writer: TraceWriter, *, exact: bool, capture: ArgumentCapture) -> None:
        super().__init__(writer, exact=exact)
        self.capture = capture

    def _dispatch(self, func: Any, args: tuple, kwargs: dict) -> Any:
        index = self.next_index
        if self.internal or index not in self.capture.indices:
            return super()._dispatch(func, args, kwargs)
        with self.quiet():
            kept_args, kept_kwargs = self.capture.keep_arguments((args, kwargs))
        result = super()._dispatch(func, args, kwargs)
        if self.next_index == index + 1:  # this op was recorded as `index` (not skipped)
            self.capture.add(index, func, kept_args, kept_kwargs, result)
        return result
