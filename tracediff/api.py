"""The Python API: `with tracediff.record("run.jsonl"): ...`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tracediff.outputs import rank_path
from tracediff.record.backends import resolve_backend


def record(
    path: str | os.PathLike[str],
    *,
    backend: str | None = None,
    seed: int | None = None,
    exact: bool = False,
) -> Any:
    """Record every op run inside the `with` block to the JSONL trace `path` (in each rank of a torchrun
    launch, `path` with the rank in its name, `run.rank1.jsonl`: every rank writes its own).

    backend: redirect `torch.compile` calls made inside the block (None: leave them as written).
    seed: seed torch/random/numpy first (None: leave the RNG alone).
    exact: also store a bitwise hash of every tensor.

        with tracediff.record("run.jsonl"):
            model(x)
    """
    from tracediff.record.session import RecordingSession

    return RecordingSession(rank_path(Path(path)), backend=resolve_backend(backend) if backend else None, seed=seed, exact=exact)
