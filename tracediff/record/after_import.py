"""Run a callback once a module is imported: at once if it is, else as soon as its import completes.

Importing dynamo costs about a second of each recording. A recording under the eager backend never compiles, yet
the recorder must tell dynamo which of its frames never to trace, and the module tracker must know dynamo's
compiled-module class, should dynamo be imported after all (flex_attention compiles internally; a library may
import dynamo itself). Each does so through `AfterImport("torch._dynamo", ...)`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


class AfterImport(importlib.abc.MetaPathFinder):
    """While active, `callback(module)` runs once `name` is imported (now, if it is already)."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.callback = callback

    def __enter__(self) -> AfterImport:
        module = sys.modules.get(self.name)
        if module is not None:
            self.callback(module)
        else:
            sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; and the finders after it find the module as ever
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module
        callback = self.callback

        def exec_module(module: ModuleType) -> None:
            execute(module)
            callback(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this module's own loader
        return spec
