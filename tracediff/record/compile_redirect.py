"""Redirect the script's own `torch.compile` calls to the chosen backend.

Every function or module the script compiles becomes a *region*: each call of
it is recorded with its inputs and outputs, under every backend, eager
included. Regions are values both runs always materialize, so they anchor the
alignment even where inductor's fusion hides every op in between.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch

from tracediff.record.backends import Backend
from tracediff.record.graphsafe_rng import GraphSafeRng
from tracediff.record.judging.policy import JudgePolicy
from tracediff.record.mode import TraceRecorder
from tracediff.record.modules import UncompiledModule


def _flat_tensors(prefix: str, value: Any) -> list[tuple[str, torch.Tensor]]:
    leaves, _ = torch.utils._pytree.tree_flatten(value)
    return [(f"{prefix}{i}", t) for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)]


def _label(model: Any, region: int) -> str:
    """What the judge calls a compiled region's graphs: `Net.forward` (region 0)."""
    if isinstance(model, torch.nn.Module):
        name = f"{type(model).__name__}.forward"
    else:
        name = getattr(model, "__qualname__", None) or getattr(model, "__name__", None) or type(model).__name__
    return f"{name} (region {region})"


class CompileRedirect:
    """Context manager: while active, `torch.compile` uses `backend` and records regions."""

    def __init__(self, backend: Backend | None, recorder: TraceRecorder | None,
                 before_compile: Callable[[Any], bool | None] | None = None,
                 wrap: Callable[[Any, Any], Any] | None = None, judge: JudgePolicy | None = None) -> None:
        # backend None: keep whatever backend the script asked for.
        self.backend = backend
        self.recorder = recorder
        # `tracediff fix`: called with what the script compiles, before it is (fix/apply.py); and, in an
        # unrecorded run, what wraps each compiled function to time it (record/call_timer.py).
        self.before_compile = before_compile
        self.wrap = wrap
        # Each graph the backend compiles is judged call by call on its own inputs (record/judging/), on the calls
        # this policy chooses; None: not judged.
        self.judge = judge
        self.compile_calls = 0
        self.dropped_options: list[str] = []
        self._original: Callable[..., Any] | None = None
        self._region_calls: dict[int, int] = {}
        self._graphsafe_rng = GraphSafeRng()  # CUDA graphs under fallback_random (record/graphsafe_rng.py)

    def __enter__(self) -> CompileRedirect:
        self._original = torch.compile
        torch.compile = self.compile
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._original is not None:
            torch.compile = self._original
        self._graphsafe_rng.restore()

    def compile(self, model: Any = None, **kwargs: Any) -> Any:
        """Stands in for torch.compile with the same signature."""
        if model is None:  # used as @torch.compile(...) with arguments
            return lambda fn: self.compile(fn, **kwargs)
        region = self.compile_calls
        self.compile_calls += 1
        # `tracediff fix` may ask for no compilation at all (False): the function itself, as under `eager`.
        compiles = self.before_compile(model) if self.before_compile is not None else None
        compiled = model if compiles is False else self._compile(model, kwargs, region)
        if self.recorder is None:
            return compiled if self.wrap is None else self.wrap(model, compiled)
        if isinstance(model, torch.nn.Module):
            return self._wrap_module(model, UncompiledModule(model) if compiled is model else compiled, region)
        return self._wrap_function(model, compiled, region)

    def _compile(self, model: Any, kwargs: dict[str, Any], region: int = 0) -> Any:
        assert self._original is not None
        if self.backend is None or self.backend.is_inductor:
            self._graphsafe_rng.before_compile(kwargs)
        if self.backend is None:
            return self._original(model, **kwargs)
        if not self.backend.compiles:
            return model
        if not self.backend.is_inductor:
            # mode= and options= are inductor's; other backends reject them.
            for key in ("mode", "options"):
                if kwargs.pop(key, None) is not None:
                    self.dropped_options.append(key)
        judged = self.judge is not None
        kwargs["backend"] = self._judged(self.backend.compile_backend, kwargs, _label(model, region)) if judged \
            else self.backend.compile_backend
        return self._original(model, **kwargs)

    def _judged(self, compile_backend: Any, kwargs: dict[str, Any], label: str) -> Any:
        """The backend wrapped so each graph it compiles is judged; dynamo's own (`eager`) compiles nothing to
        judge: its graph is the reference."""
        if compile_backend == "eager" or self.recorder is None:
            return compile_backend
        from tracediff.record.judging.backend import JudgingBackend, inner_backend

        return JudgingBackend(inner_backend(compile_backend, kwargs), self.recorder, label, policy=self.judge)

    def _next_call(self, region: int) -> int:
        call = self._region_calls.get(region, 0)
        self._region_calls[region] = call + 1
        return call

    def _wrap_function(self, fn: Callable[..., Any], compiled: Callable[..., Any], region: int) -> Callable[..., Any]:
        recorder = self.recorder
        assert recorder is not None
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, torch.nn.Module):  # module.compile() compiles its bound _call_impl
            root: str | None = recorder.modules.name_of(owner)
            name = f"{root}.forward"
        else:
            root = None
            name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__

        @functools.wraps(fn)
        def region_call(*args: Any, **kwargs: Any) -> Any:
            if not recorder.records_here():  # another thread, or a forked child
                return compiled(*args, **kwargs)
            call = self._next_call(region)
            recorder.region_enter(name, root, region, call, _flat_tensors("in", (args, kwargs)))
            out = compiled(*args, **kwargs)
            recorder.region_exit(name, region, call, _flat_tensors("out", out))
            return out

        return region_call

    def _wrap_module(self, module: torch.nn.Module, compiled: Any, region: int) -> Any:
        recorder = self.recorder
        assert recorder is not None
        root = recorder.modules.name_of(module)
        if compiled is not module:
            recorder.modules.alias(compiled, module)
        name = f"{root}.forward"

        # Calls in flight, innermost last; kept off the module so dynamo guards never see it.
        active_calls: list[int] = []

        def pre_hook(_mod: torch.nn.Module, args: Any, kwargs: Any) -> None:
            if not recorder.records_here():  # another thread, or a forked child
                return
            active_calls.append(self._next_call(region))
            recorder.region_enter(name, root, region, active_calls[-1], _flat_tensors("in", (args, kwargs)))

        def post_hook(_mod: torch.nn.Module, _args: Any, _kwargs: Any, out: Any) -> None:
            if not recorder.records_here():
                return
            call = active_calls.pop() if active_calls else 0
            recorder.region_exit(name, region, call, _flat_tensors("out", out))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled.register_forward_pre_hook(pre_hook, with_kwargs=True)
            compiled.register_forward_hook(post_hook, with_kwargs=True)
        return compiled
