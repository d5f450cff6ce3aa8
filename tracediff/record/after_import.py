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
        self._searching = False  # asking the other finders, which may include another AfterImport

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
        # Not removed here: `importlib.util.find_spec` asks without importing. Removed once the module has run.
        if fullname != self.name or self._searching:
            return None
        self._searching = True
        try:
            spec = next((found for finder in sys.meta_path if finder is not self and hasattr(finder, "find_spec")
                         if (found := finder.find_spec(fullname, path, target)) is not None), None)
        finally:
            self._searching = False
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            self.__exit__()
            self.callback(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's own loader
        return spec
