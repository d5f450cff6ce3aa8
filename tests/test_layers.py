"""The import graph reads as the pipeline: record -> trace -> align -> verdict -> report, data going one way.

Every import of tracediff's own modules counts, at module level, inside functions and under TYPE_CHECKING:
a package imports only itself and the layers below it, two packages of one layer never import each other,
and no module imports one that (through others) imports it back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tracediff

PACKAGE = Path(tracediff.__file__).parent

# Lowest first. A unit is a subpackage or a top-level module; units of one layer are side by side.
LAYERS: list[set[str]] = [
    {"errors", "op_names"},  # the exit codes and the two kinds of error; op names and their parts
    {"config", "outputs", "quiet", "_version"},  # what everything may use
    {"trace", "outcome", "judge"},  # the trace's schema and files; the result types; the same-input criterion
    {"record", "diff"},  # making a trace; aligning two and deciding the verdict
    {"report", "launch"},  # rendering an outcome; running a script under the recorder in a subprocess
    {"repro", "bisect"},  # tools built on recorded runs
    {"run"},  # the pipeline of `tracediff run`
    {"fix"},  # `tracediff fix`: a search over changes, each verified by `run`'s pipeline
    {"cli", "api", "testing", "child"},  # entry points: the command line, `tracediff.record`, `assert_match`, the recording child
    {"__init__", "pytest_plugin"},  # the package's public names; the pytest fixture built on `testing`
]


def _unit(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _layer(unit: str) -> int:
    for number, units in enumerate(LAYERS):
        if unit in units:
            return number
    raise AssertionError(f"tracediff.{unit} is in no layer of tests/test_layers.py: place it")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in modules else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_package_imports_only_layers_below_it() -> None:
    wrong = []
    for module, targets in _graph().items():
        unit = _unit(module)
        for target in targets:
            other = _unit(target)
            if other != unit and _layer(other) >= _layer(unit):
                wrong.append(f"{module} imports {target} (layer {_layer(other)} >= {_layer(unit)})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_module_imports_itself_back() -> None:
    graph = _graph()
    cycles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert not cycles, cycles


def test_the_check_sees_imports_inside_functions() -> None:
    """The rules above are only as good as the graph: an import inside a function is an edge too."""
    graph = _graph()
    assert "tracediff.record.session" in graph["tracediff.api"]  # imported inside `record()`
