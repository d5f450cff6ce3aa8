"""Which user source line and nn.Module an op comes from.

The source line is the innermost stack frame outside torch, tracediff and the
standard library: user code or third-party model code. Inside a compiled region
the Python frames are the generated graph code, so the line comes from the FX
node that is executing (its `stack_trace` meta), found through the graph
module's line map.
"""

from __future__ import annotations

import functools
import linecache
import os
import re
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from tracediff.record.identity import identity

_FX_FRAME_PREFIX = "<eval_with_key>"
# What a stack frame's code object is to the walk for the user's line.
_GENERATED, _FX, _INTERNAL, _USER = 0, 1, 2, 3
_STACK_TRACE_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


@dataclass(frozen=True)
class SourceLocation:
    path: str
    line: int
    code: str

    @functools.cached_property
    def short(self) -> str:
        return f"{os.path.basename(self.path)}:{self.line}"


@dataclass(frozen=True)
class FusedSource:
    """Where a generated kernel's value comes from: the last op it fuses that has a source line."""

    src: str | None = None  # "model.py:42"
    path: str | None = None
    code: str | None = None
    module: str | None = None


@dataclass(frozen=True)
class FxNodeInfo:
    """What an FX node tells about the user code it came from."""

    source: SourceLocation | None
    module: str | None
    graph: str


def _package_dir(module: Any) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


@functools.lru_cache(maxsize=1)
def _directories() -> tuple[tuple[str, ...], str, tuple[str, ...]]:
    """(torch's and tracediff's directories, the standard library's, site-packages'): fixed for the
    process, and reading them (sysconfig) costs more than recording a session's first ops."""
    paths = sysconfig.get_paths()
    tracediff_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # tracediff/record/..
    return ((_package_dir(torch), tracediff_dir), paths["stdlib"] + os.sep,
            tuple({paths["purelib"] + os.sep, paths["platlib"] + os.sep}))


class SourceFinder:
    """Finds the user frame of the op being dispatched. Caches per code object."""

    def __init__(self) -> None:
        # site-packages lives under the stdlib directory, but its third-party model
        # code (transformers' modeling_gpt2.py) is exactly what users want to see.
        self._skip_prefixes, self._stdlib, self._installed = _directories()
        # By the code object's identity (record/identity.py), holding the code object (so it is not reused while
        # filed): hashing a code object hashes its contents, constants included, for every frame of every op's walk.
        self._kind: dict[int, tuple[Any, int]] = {}  # identity(code) -> (code, _GENERATED | _FX | _INTERNAL | _USER)
        self._locations: dict[tuple[int, int], tuple[Any, SourceLocation]] = {}  # (identity(code), line) -> (code, ...)
        self._fx_line_cache: dict[tuple[int, int], FxNodeInfo | None] = {}
        # Generated wrapper files (inductor) -> line of a call -> the user source it came from.
        self._generated: dict[str, Callable[[int], SourceLocation | None]] = {}
        # The globals of modules whose code is internal (torch's, the standard library's), by identity -> the dict:
        # a frame running with them is skipped without reading its `f_code`, an audit event (record/identity.py).
        self._internal_modules: dict[int, dict[str, Any]] = {}

    def register_generated(self, filename: str, lookup: Callable[[int], SourceLocation | None]) -> None:
        """Resolve frames in generated code `filename` through `lookup(line)` (e.g. inductor provenance)."""
        self._generated[filename] = lookup
        self._kind.clear()  # code objects of that file were classified before it was known
        self._internal_modules.clear()

    def _kind_of(self, code: Any) -> int:
        """What a frame of `code` is to the walk: _GENERATED, _FX, _INTERNAL or _USER (cached per code object)."""
        known = self._kind.get(identity(code))
        if known is not None:
            return known[1]
        name = code.co_filename
        if name in self._generated:
            kind = _GENERATED
        elif name.startswith(_FX_FRAME_PREFIX):
            kind = _FX
        elif (
            name.startswith(self._skip_prefixes)
            or (name.startswith(self._stdlib) and not name.startswith(self._installed))
            or name.startswith("<")  # <frozen ...>, <string>, generated code
            or "torchinductor_" in name  # inductor's generated wrapper modules
        ):
            kind = _INTERNAL
        else:
            kind = _USER
        self._kind[identity(code)] = (code, kind)
        return kind

    def find(self, frame: FrameType | None) -> tuple[SourceLocation | None, FxNodeInfo | None, bool]:
        """(user source location, FX node info if inside a compiled graph, whether the location came
        from a compiled graph's own record of its lines: FX node meta or inductor provenance, which
        name the forward line of a backward graph's ops already)."""
        fx: FxNodeInfo | None = None
        internal_modules = self._internal_modules
        while frame is not None:
            module_globals = frame.f_globals
            module_key = identity(module_globals)
            if module_key in internal_modules:
                frame = frame.f_back
                continue
            code = frame.f_code
            kind = self._kind_of(code)
            if kind == _INTERNAL:
                # Code of the module file its globals came from: every frame with those globals is that module's.
                if code.co_filename == module_globals.get("__file__"):
                    internal_modules[module_key] = module_globals
                frame = frame.f_back
                continue
            if kind == _USER:
                return self._location(code, frame.f_lineno), fx, False
            if kind == _GENERATED:
                location = self._generated[code.co_filename](frame.f_lineno)
                if location is not None:
                    return location, fx, True
            elif fx is None:  # _FX
                fx = self._fx_node_info(frame)
                if fx is not None and fx.source is not None:
                    return fx.source, fx, True
            # generated or FX code without an answer: an internal frame, as before
            frame = frame.f_back
        return None, fx, False

    def _location(self, code: Any, line: int) -> SourceLocation:
        """The source line (cached: one object per code object and line)."""
        key = (identity(code), line)
        known = self._locations.get(key)
        if known is not None:
            return known[1]
        path = code.co_filename
        location = SourceLocation(path, line, linecache.getline(path, line).strip())
        self._locations[key] = (code, location)
        return location

    def _fx_node_info(self, frame: FrameType) -> FxNodeInfo | None:
        gm = frame.f_locals.get("self")
        if not isinstance(gm, torch.fx.GraphModule):
            return None
        key = (identity(gm), frame.f_lineno)
        if key in self._fx_line_cache:
            return self._fx_line_cache[key]
        info = None
        # Same lookup as torch._utils uses for FX frames in stack traces.
        lineno_map = getattr(gm, "_lineno_map", None) or {}
        node_index = lineno_map.get(frame.f_lineno - getattr(gm, "_prologue_start", 0))
        if node_index is not None:
            nodes = list(gm.graph.nodes)
            if 0 <= node_index < len(nodes):
                info = node_info(nodes[node_index], type(gm).__name__)
        self._fx_line_cache[key] = info
        return info


def node_info(node: torch.fx.Node, graph: str) -> FxNodeInfo:
    source = None
    stack_trace = node.meta.get("stack_trace")
    if stack_trace:
        # The innermost user frame is the last "File ..." entry outside torch.
        frames = [m for m in _STACK_TRACE_LINE.finditer(stack_trace)]
        torch_dir = _package_dir(torch)
        user = [m for m in frames if not m.group("file").startswith(torch_dir)]
        if user:
            m = user[-1]
            path, line = m.group("file"), int(m.group("line"))
            source = SourceLocation(path, line, linecache.getline(path, line).strip())
    module = None
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if stack:
        # Values are (qualified path like "L['self'].block.act", class); the last is innermost.
        path_name, _cls = list(stack.values())[-1]
        module = clean_fx_module_path(str(path_name))
    return FxNodeInfo(source=source, module=module, graph=graph)


_FX_PATH_PART = re.compile(r"\[['\"]?([^'\"\]]+)['\"]?\]")


def clean_fx_module_path(path: str) -> str:
    """`L['self'].block._modules['act']` -> `block.act` (relative to the compiled module).

    The first component names the compiled module's local variable (`self`,
    `model`, ...), so it is dropped; the caller prefixes the region's root name.
    """
    path = _FX_PATH_PART.sub(lambda m: "." + m.group(1), path)
    parts = [p for p in path.split(".") if p and p != "_modules"]
    if parts and parts[0] == "L":
        parts = parts[1:]
    return ".".join(parts[1:])

