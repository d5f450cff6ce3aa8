"""`tracediff.assert_match`: a test asserts that a function computes the same under a backend.

    def test_block_compiles_faithfully():
        tracediff.assert_match(block, (x,), backend="inductor")

Runs `fn(*inputs)` twice in this process under the recorder: plain eager,
then `torch.compile(fn, backend=backend)`, each from the same seed and on
its own copy of the inputs; diffs the two recordings with the engine of
`tracediff diff`, and raises AssertionError carrying the divergence report
(op, source line, module, numbers, trace paths) when they differ. Dynamo's
caches are reset around each run so an earlier compile of `fn` in the same
process cannot stand in for this one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracediff.config import Config


def _copy_inputs(inputs: Any) -> Any:
    """A fresh copy of every tensor, so an in-place op in run A cannot change run B's inputs."""
    import torch
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: t.detach().clone().requires_grad_(t.requires_grad), inputs)


def _backend(backend: str | Callable[..., Any]) -> Any:
    from tracediff.record.backends import Backend, resolve_backend

    if callable(backend):
        return Backend(getattr(backend, "__name__", type(backend).__name__), backend)
    return resolve_backend(backend)


def _config(config: Config | str | os.PathLike[str] | None, rtol: float | None, atol: float | None) -> Config:
    from tracediff.config import load_config

    if not isinstance(config, Config):
        config = load_config(config)  # None: ./tracediff.yaml if there is one, else the defaults
    return config.with_overrides(rtol=rtol, atol=atol)


def record_call(path: Path, fn: Callable[..., Any], inputs: tuple[Any, ...], backend: Any, seed: int) -> None:
    """Record one call of `torch.compile(fn)` (redirected to `backend`) into `path`."""
    import torch

    from tracediff.record.session import RecordingSession

    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    torch._dynamo.reset()
    try:
        with RecordingSession(path, backend=backend, seed=seed, command=[f"tracediff.assert_match({name})"]):
            compiled = torch.compile(fn)  # the session's redirect picks the backend and records a region
            compiled(*_copy_inputs(inputs))
    finally:
        torch._dynamo.reset()


def assert_match(
    fn: Callable[..., Any],
    inputs: Any,
    backend: str | Callable[..., Any] = "inductor",
    *,
    config: Config | str | os.PathLike[str] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    trace_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Assert that `fn(*inputs)` under `backend` matches eager; return the report.

    inputs: a tuple of arguments (a single tensor is taken as one argument).
    backend: a torch.compile backend name (`inductor`, `aot_eager`, `dynamo`, ...) or a backend callable.
    config: a `Config`, a tracediff.yaml path, or None (./tracediff.yaml if present, else defaults);
    rtol/atol override its float tolerances.
    trace_dir: where the two traces go; None: a temporary directory, removed when they match.
    On divergence or a failed run, raises AssertionError with the text report and keeps the traces.
    """
    from tracediff.diff.decide import decide
    from tracediff.diff.engine import diff_traces
    from tracediff.outputs import RunDir
    from tracediff.report.text import render_text

    settings = _config(config, rtol, atol)
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    resolved = _backend(backend)
    directory = Path(trace_dir) if trace_dir is not None else Path(tempfile.mkdtemp(prefix="tracediff-"))
    directory.mkdir(parents=True, exist_ok=True)
    run_dir = RunDir(directory, settings.compress)
    traces = [run_dir.trace("a", "eager"), run_dir.trace("b", resolved.name)]
    record_call(traces[0], fn, args, _backend("eager"), seed)
    record_call(traces[1], fn, args, resolved, seed)
    report = decide(diff_traces(traces[0], traces[1], settings), [str(t) for t in traces], settings).to_json()
    if report["verdict"] != "match":
        raise AssertionError(f"tracediff: {getattr(fn, '__qualname__', fn)} under backend {resolved.name} does not "
                             f"match eager\n\n{render_text(report)}traces kept in {directory}")
    if trace_dir is None:
        shutil.rmtree(directory, ignore_errors=True)
    return report
