"""Build small synthetic traces by hand, for testing alignment and verdicts without torch runs."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from tracediff.record.fingerprints.fingerprint import fingerprint
from tracediff.trace.writer import TraceWriter


class TraceBuilder:
    """Write op/region records whose tensors are real values, so fingerprints are real."""

    def __init__(self, path: Path, backend: str = "eager", compile_calls: int = 1) -> None:
        self.writer = TraceWriter(path, {"backend": backend, "torch": torch.__version__, "device": "cpu"})
        self.path = path
        self.seq = 0
        self.compile_calls = compile_calls
        self._ids: dict[str, int] = {}

    def tensor(self, name: str, value: torch.Tensor, arg: str = "self", base: str | None = None,
               **extra: Any) -> dict[str, Any]:
        """`base`: the name of the tensor this one is a view of (its storage's owner)."""
        tid = self._ids.setdefault(name, len(self._ids))
        if base is not None:
            extra["b"] = self._ids.setdefault(base, len(self._ids))
        return {"a": arg, "id": tid, "v": 0, "dt": str(value.dtype).removeprefix("torch."), "sh": list(value.shape),
                "dev": "cpu", "fp": fingerprint(value), **extra}

    def op(self, op: str, inputs: list[dict], outputs: list[dict], src: str = "model.py:1", module: str = "Net",
           **extra: Any) -> int:
        index = self.seq
        self.writer.write({"t": "op", "i": index, "op": op, "d": 1, "m": module, "src": src, "code": "",
                           "in": inputs, "out": outputs, **extra})
        self.seq += 1
        return index

    def kernel(self, name: str, inputs: list[dict], outputs: list[dict], src: str | None = "model.py:1",
               fuses: Sequence[str | dict] = ("aten::mul.Tensor",), module: str = "Net", **extra: Any) -> None:
        """A generated kernel's launch; `fuses`: its ops, each an op name (at `src`) or a whole fused-op dict."""
        self.writer.write({"t": "kernel", "i": self.seq, "name": name, "src": src, "m": module,
                           "fuses": [f if isinstance(f, dict) else {"op": f, "src": src} for f in fuses],
                           "in": inputs, "out": outputs, **extra})
        self.seq += 1

    def region(self, ev: str, tensors: list[dict], call: int = 0) -> None:
        key = "in" if ev == "enter" else "out"
        self.writer.write({"t": "region", "i": self.seq, "ev": ev, "name": "Net.forward", "r": 0, "call": call,
                           "d": 0, key: tensors})
        self.seq += 1

    def close(self) -> Path:
        self.writer.close({"ops": self.seq, "compile_calls": self.compile_calls, "error": None})
        return self.path


BENCH_SYNTH = Path(__file__).resolve().parents[1] / "bench" / "synth.py"


def bench_synth() -> ModuleType:
    """bench/synth.py, the diff-scale benchmark's generator of trace pairs (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_synth", BENCH_SYNTH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
