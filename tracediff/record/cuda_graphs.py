"""CUDA graphs under recording: their captures, and cudagraph trees' calls, run unrecorded.

A CUDA graph's capture enqueues work without running it: an op recorded then would be read before it ran,
and a fingerprint launched then would become part of the graph. Its replay runs that work without an op or
kernel launch the recorder could see. Inductor's `mode="reduce-overhead"` runs each compiled graph through
cudagraph trees, whose first call (the warmup) allocates into the graph's private memory pool and then checks
that nothing but the graph's outputs lives there: a tensor tracediff holds (queued for a fingerprint) or
allocates (a fingerprint's buffer) there fails the program with "Detected N tensor(s) in the cudagraph pool
not tracked as outputs".

So nothing is recorded while a CUDA graph is captured or while cudagraph trees run a call, and the
fingerprints still queued are launched before a capture, a replay and each cudagraph trees call (a replay
overwrites the outputs of the one before, and their version counters miss the write: each output a cudagraph
trees call returns is counted a new value, and after a replay of a graph made by hand every CUDA tensor is). A
compiled region run as a CUDA graph is recorded by its call (its
inputs and its outputs, read after the replay, on the replay's stream) and judged on its own inputs, as under
`--light`.

Pinned torch internals (tests/test_torch_pins.py): torch.cuda.graphs.CUDAGraph's capture_begin, capture_end
and replay (public API), torch._inductor.cudagraph_trees.CUDAGraphTreeManager.run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from tracediff.record.mode import TraceRecorder


class CudaGraphGuard:
    """While active, CUDA graph captures and cudagraph trees' calls record nothing (see the module's doc)."""

    def __init__(self, recorder: TraceRecorder, trees: bool = True) -> None:
        self.recorder = recorder
        self.trees = trees  # inductor may run: guard cudagraph trees too (importing them imports inductor)
        self._resume_to: list[bool] = []  # the recorder's state at each capture begun and not yet ended
        self._restores = contextlib.ExitStack()

    def __enter__(self) -> CudaGraphGuard:
        if not torch.cuda.is_available():  # no CUDA graph can be made: nothing to import or patch
            return self
        from torch.cuda.graphs import CUDAGraph

        with contextlib.ExitStack() as restores:  # a failure half-way undoes what was patched
            self._restores = restores
            self._patch(CUDAGraph, "capture_begin", self._wrap_capture_begin)
            self._patch(CUDAGraph, "capture_end", self._wrap_capture_end)
            self._patch(CUDAGraph, "replay", self._wrap_replay)
            if self.trees:
                from torch._inductor import cudagraph_trees

                self._patch(cudagraph_trees.CUDAGraphTreeManager, "run", self._wrap_tree_run)
            self._restores = restores.pop_all()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._restores.close()

    def _patch(self, owner: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        original = owner.__dict__[name]  # the class's own function
        self._restores.callback(setattr, owner, name, original)
        setattr(owner, name, make(original))

    def _wrap_capture_begin(self, original: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
            guard.recorder.flush_fingerprints()  # launched now, or they would be captured into the graph
            guard._resume_to.append(guard.recorder.pause())
            try:
                return original(graph, *args, **kwargs)
            except BaseException:
                guard.recorder.resume(guard._resume_to.pop())
                raise

        return capture_begin

    def _wrap_capture_end(self, original: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(graph, *args, **kwargs)
            finally:
                if guard._resume_to:
                    guard.recorder.resume(guard._resume_to.pop())

        return capture_end

    def _wrap_replay(self, original: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        def replay(graph: Any, *args: Any, **kwargs: Any) -> Any:
            guard.recorder.flush_fingerprints()  # the replay overwrites its outputs, which may be queued
            result = original(graph, *args, **kwargs)
            guard.recorder.tensors.cuda_written_unseen()  # which tensors it wrote, the recorder cannot see
            return result

        return replay

    def _wrap_tree_run(self, original: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        def run(manager: Any, *args: Any, **kwargs: Any) -> Any:
            recorder = guard.recorder
            recorder.flush_fingerprints()
            previous = recorder.pause()
            try:
                outputs = original(manager, *args, **kwargs)
            finally:
                recorder.resume(previous)
            # A replay writes the outputs' static memory, which the tensors returned by the call before may still
            # hold, without a version bump: each is a new value.
            for t in outputs if isinstance(outputs, (list, tuple)) else ():
                if isinstance(t, torch.Tensor):
                    recorder.tensors.written_unseen(t)
            return outputs

        return run
