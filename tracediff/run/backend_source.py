"""Does a module's source define a name? Read with `ast`, so no user code runs.

Used to refuse `--backends eager,module:typo` in a second, instead of after a
full eager run. Only a plain "no" counts: a module that can make names at run
time (`from x import *`, a module `__getattr__`, writes to `globals()`) is
given the benefit of the doubt, and the child's import decides.
"""

from __future__ import annotations

import ast
from pathlib import Path


def defines(source: Path, name: str) -> bool:
    """False only when `source` surely binds no top-level `name`; True when it does or cannot be told."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8", errors="replace"), filename=str(source))
    except (OSError, SyntaxError, ValueError):
        return True  # let the import report it
    bound: set[str] = set()
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return True
                bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With, ast.AsyncWith)):
            bound |= _targets(node)
    if "__getattr__" in bound or _writes_globals(tree):
        return True
    return name in bound


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements run at import, into if/try/with/for blocks (a backend defined under `if HAS_TRITON:` counts)."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # their bodies run later, in their own scope
        for field in ("body", "orelse", "finalbody"):
            out += _top_level(getattr(node, field, None) or [])
        for handler in getattr(node, "handlers", None) or []:
            out += _top_level(handler.body)
    return out


def _targets(node: ast.stmt) -> set[str]:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _writes_globals(tree: ast.Module) -> bool:
    """`globals()[...] = ...`, `setattr(sys.modules[__name__], ...)`: names made at run time."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id == "globals":
            return True
        if node.func.id == "setattr" and node.args and "modules" in ast.dump(node.args[0]):
            return True
    return False
