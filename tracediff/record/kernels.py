"""Inductor's generated kernels in the trace, with the aten ops each one fuses.

The dispatcher never sees inductor's generated kernels (C++ on CPU, Triton on
CUDA), so a dispatch mode alone records almost nothing of an inductor run.
This module hooks `CompiledFxGraph.post_compile`, which runs on a cold compile
and on both warm cache paths (FX graph cache, AOTAutograd cache), and replaces
each kernel in the loaded wrapper module's globals by a recording wrapper
(the wrapper's `call()` looks kernels up by name at call time). Triton kernels
are recorded by wrapping `CachingAutotuner.run`.

Which aten ops a kernel fuses comes from inductor's own provenance tracking
(`config.trace.provenance_tracking_level = 1`, part of inductor's cache keys):
`inductor_provenance_mapping_str` maps each kernel call site to post-grad FX
nodes, and `inductor_post_grad_graph_str` gives each node's aten op and user
source line. Module paths come from the pre-grad (dynamo) graph, which dynamo
re-traces in every process, captured by wrapping `compile_fx` and the
`_maybe_wrap_and_compile_fx_main` it calls (the one a custom backend that
imported `compile_fx` itself still reaches).

Pinned torch internals (tests/test_torch_pins.py): CompiledFxGraph.post_compile,
its compiled_fn_runner/current_callable, source_code, the two provenance
strings; debug._pre_grad_graph_id; compile_fx.compile_fx (and _maybe_wrap_and_compile_fx_main, where present); CachingAutotuner.run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import linecache
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from tracediff.op_names import from_target
from tracediff.record.aten_annotation import annotated_op
from tracediff.record.identity import identity
from tracediff.record.source import FusedSource, SourceLocation, clean_fx_module_path

if TYPE_CHECKING:
    from tracediff.record.mode import TraceRecorder

_CPP_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.cpp_pybinding\((\[.*?\]), r'''(.*?)'''\)", re.S | re.M)
_CPP_SIGNATURE = re.compile(r'extern "C"\s+void\s+kernel\((.*?)\)', re.S)
_PROVENANCE_HANDLE = re.compile(r"#\s*\[Provenance debug handles\] (\S+):(\d+)\s*$")
# A node summary's source line; a script's own `fx.traceback.annotate` (or ours) puts an annotation before it.
_POST_GRAD_FILE = re.compile(r"#(?:\s*Annotation: \{.*?\})?\s*File: (.*?):(\d+) in (\S+), code: (.*)$")
# A call node: name, op, arguments (a node with several outputs has no type annotation).
_POST_GRAD_CALL = re.compile(r"^\s*(\w+)(?:: .*?)? = torch\.ops\.([\w.]+)\((.*)$")
# A NaN/Inf literal among a node's arguments, as FX prints floats: `full.default([8, 8], -inf, ...)`.
_NONFINITE_LITERAL = re.compile(r"(?<![\w.'\"])-?(?:inf|nan)(?![\w.'\"])")

# Stands for "a graph compiled outside dynamo's compile" (a lazily compiled backward) in
# inductor's provenance globals; any non-zero id turns its mapping on.
_BACKWARD_GRAPH_ID = 1

# Argument names of generated kernels that the kernel writes: inductor's `out_ptr0`, `in_out_ptr0`, and any
# argument it lists as mutated, renamed `in_out_<name>` (`_triton_arg_names`).
_OUTPUT_PREFIXES = ("out_ptr", "in_out_")


def is_written_argument(name: str) -> bool:
    """Whether a generated kernel's argument of this (recorded) name is one the kernel writes."""
    return name.startswith(_OUTPUT_PREFIXES)


@dataclass(frozen=True)
class FusedOp:
    """One aten op inside a kernel: what the user wrote and where."""

    node: str
    op: str  # "aten::sin"
    path: str | None
    line: int | None
    module: str | None  # relative to the compiled module
    nonfinite_constant: bool = False  # writes a NaN/Inf literal: `full([n, n], -inf)`, `where(m, x, -inf)`
    original: str | None = None  # the op it was decomposed from ("aten::threshold_backward"), where known

    def as_record(self, root: str | None) -> dict[str, Any]:
        import os

        module = ".".join(p for p in (root, self.module) if p) or None
        record: dict[str, Any] = {
            "node": self.node,
            "op": self.op,
            "src": f"{os.path.basename(self.path)}:{self.line}" if self.path else None,
            "path": self.path,
            "m": module,
        }
        if self.nonfinite_constant:
            record["nfs"] = True  # as an op's `nfs`: its NaN/Inf are on purpose (a mask), not a NaN origin
        if self.original:
            record["orig"] = self.original
        return record


@dataclass
class GraphKernels:
    """What one compiled graph's wrapper module tells about its kernels."""

    graph: str
    fuses: dict[str, list[FusedOp]] = field(default_factory=dict)  # "kernel:handle" -> ops, graph order
    site_handles: dict[int, str] = field(default_factory=dict)  # wrapper line of a call -> handle
    params: dict[str, list[str]] = field(default_factory=dict)  # kernel -> C++ parameter names

    def fused_ops(self, kernel: str, site: str | None) -> list[FusedOp]:
        """The ops a launch of `kernel` fuses: by its call site, else its only handle."""
        if site in self.fuses:
            return self.fuses[site]
        handles = [ops for handle, ops in self.fuses.items() if handle.rpartition(":")[0] == kernel]
        return handles[0] if len(handles) == 1 else []


class PostGradNode(NamedTuple):
    op: str  # "aten::le.Scalar"
    path: str | None
    line: int | None
    original: str | None  # "aten::threshold_backward", where annotated; FX cuts a long name to 40 characters + "..."


def parse_post_grad_graph(text: str) -> dict[str, PostGradNode]:
    """Post-grad node name -> its op, source and original op, in graph order."""
    nodes: dict[str, PostGradNode] = {}
    path: str | None = None
    line: int | None = None
    original: str | None = None
    for row in text.splitlines():
        if row.lstrip().startswith("#"):  # a summary of the nodes below it
            original = annotated_op(row)
        match = _POST_GRAD_FILE.search(row)
        if match:
            path, line = match.group(1), int(match.group(2))
            continue
        match = _POST_GRAD_CALL.match(row)
        if match:
            nodes[match.group(1)] = PostGradNode(from_target(match.group(2)), path, line, original)
        elif not row.strip():
            path, line, original = None, None, None
    return nodes


def nonfinite_constant_nodes(text: str) -> set[str]:
    """Post-grad nodes with a NaN/Inf literal argument: they write a non-finite constant (a causal
    mask's `full(-inf)`, SDPA's boolean mask turned into `where(mask, 0, -inf)`), on purpose."""
    found = set()
    for row in text.splitlines():
        match = _POST_GRAD_CALL.match(row)
        # The arguments end at `)`; what follows `;` frees buffers (`x = None`).
        if match and _NONFINITE_LITERAL.search(match.group(3).split(";", 1)[0]):
            found.add(match.group(1))
    return found


def call_sites(source: str) -> dict[int, str]:
    """Wrapper line number (1-based) of each kernel call -> its provenance handle `kernel:N`.

    The call is the first line after the handle's comment that names the kernel
    (other lines may sit between, e.g. `stream0 = get_raw_stream(0)` before a
    Triton launch).
    """
    lines = source.splitlines()
    sites: dict[int, str] = {}
    for i, row in enumerate(lines):
        match = _PROVENANCE_HANDLE.search(row)
        if not match:
            continue
        kernel = match.group(1)
        for j in range(i + 1, min(i + 12, len(lines))):
            text = lines[j].strip()
            if not text.startswith("#") and kernel in text:
                sites[j + 1] = f"{kernel}:{match.group(2)}"
                break
    return sites


def cpp_kernel_params(source: str) -> dict[str, list[str]]:
    """C++ kernel name -> its parameter names as recorded (in_ptr0, out_ptr0, in_out_ptr0, ks0, ...).

    A template kernel names its parameters as it likes (the flex-attention template's `float* output`):
    a pointer to non-const data that no inductor prefix names is one the kernel writes, recorded as
    `out_ptr_<name>`."""
    params = {}
    for match in _CPP_KERNEL_DEF.finditer(source):
        signature = _CPP_SIGNATURE.search(match.group(3))
        if signature:
            params[match.group(1)] = [_cpp_param_name(p.strip()) for p in signature.group(1).split(",") if p.strip()]
    return params


def _cpp_param_name(declaration: str) -> str:
    """`const float* in_ptr0` -> `in_ptr0`; `float* output` -> `out_ptr_output` (see `cpp_kernel_params`)."""
    name = declaration.rsplit(" ", 1)[-1].lstrip("*")
    written = "*" in declaration and not declaration.startswith("const ")
    if written and not is_written_argument(name) and not name.startswith("in_ptr"):
        return f"out_ptr_{name}"
    return name


def build_graph_kernels(compiled: Any, pre_grad_meta: dict[str, dict[str, Any]]) -> GraphKernels:
    """Provenance of one CompiledFxGraph: kernel call sites -> fused ops with source and module."""
    info = GraphKernels(graph=str(getattr(compiled, "cache_key", "") or "graph")[:12])
    source = getattr(compiled, "source_code", "") or ""
    info.site_handles = call_sites(source)
    info.params = cpp_kernel_params(source)
    try:
        mapping = json.loads(getattr(compiled, "inductor_provenance_mapping_str", None) or "{}")
    except json.JSONDecodeError:
        mapping = {}
    post_grad_text = getattr(compiled, "inductor_post_grad_graph_str", None) or ""
    post_grad = parse_post_grad_graph(post_grad_text)
    nonfinite = nonfinite_constant_nodes(post_grad_text)
    order = {name: i for i, name in enumerate(post_grad)}
    post_to_pre = mapping.get("postToPre", {})
    for key, table in mapping.items():
        if not key.endswith("CodeToPost") or not isinstance(table, dict):
            continue
        for handle, nodes in table.items():
            ops = []
            for node in sorted(nodes, key=lambda n: order.get(n, len(order))):
                op, path, line, original = post_grad.get(node) or PostGradNode("?", None, None, None)
                module = None
                for pre in post_to_pre.get(node, []):
                    stack = (pre_grad_meta.get(pre) or {}).get("nn_module_stack")
                    if stack:
                        module = clean_fx_module_path(str(list(stack.values())[-1][0]))
                        break
                ops.append(FusedOp(node, op, path, line, module, node in nonfinite, original))
            info.fuses[handle] = ops
    return info


class KernelCapture:
    """While active, every inductor kernel launch becomes a `kernel` record of `recorder`."""

    def __init__(self, recorder: TraceRecorder) -> None:
        self.recorder = recorder
        self._pre_grad_stack: list[dict[str, dict[str, Any]]] = []
        self._triton: dict[int, tuple[GraphKernels, str]] = {}  # id(CachingAutotuner) -> (graph, name)
        # id(CachingAutotuner) -> its arguments' names as recorded (written ones with an output prefix).
        self._triton_arg_names: dict[int, list[str]] = {}
        # What a launch's record says of the ops it fuses depends only on the kernel, its call site and the
        # region's module: built once per (graph, kernel, site, root), not per launch. The graph is kept
        # in the value so that its id stays its own.
        self._fused: dict[tuple[int, str, str | None, str | None], tuple[GraphKernels, list[dict[str, Any]], FusedSource]] = {}
        self._restores = contextlib.ExitStack()  # undoes each patch, last first

    # -- installing the hooks --------------------------------------------------------

    def __enter__(self) -> KernelCapture:
        import torch._inductor.compile_fx as compile_fx_module
        import torch._inductor.config as inductor_config
        from torch._inductor import output_code

        with contextlib.ExitStack() as restores:  # a failure half-way undoes what was patched
            self._restores = restores
            self._set(inductor_config.trace, "provenance_tracking_level", 1)
            self._annotate_original_ops(inductor_config)
            self._keep_backward_provenance()
            self._install(compile_fx_module, output_code)
            self._restores = restores.pop_all()
        return self

    def _install(self, compile_fx_module: Any, output_code: Any) -> None:
        self._patch(compile_fx_module, "compile_fx", self._wrap_compile_fx)
        # A custom backend that imported compile_fx before the patch calls the original, which
        # looks this one up at call time: wrapped too, so its kernels get module paths as well.
        if hasattr(compile_fx_module, "_maybe_wrap_and_compile_fx_main"):
            self._patch(compile_fx_module, "_maybe_wrap_and_compile_fx_main", self._wrap_compile_fx)
        self._patch(output_code.CompiledFxGraph, "post_compile", self._wrap_post_compile)
        try:
            from torch._inductor.runtime.triton_heuristics import CachingAutotuner
        except ImportError:  # no triton: CPU-only install
            pass
        else:
            self._patch(CachingAutotuner, "run", self._wrap_triton_run)

    def __exit__(self, *exc: Any) -> None:
        self._restores.close()

    def _annotate_original_ops(self, inductor_config: Any) -> None:
        """Have each post-grad node say which aten op it was decomposed from (record/original_aten.py)."""
        from tracediff.record.original_aten import with_annotation

        self._set(inductor_config, "post_grad_custom_post_pass",
                  with_annotation(inductor_config.post_grad_custom_post_pass))

    def _keep_backward_provenance(self) -> None:
        """Let a backward graph compiled on the first `backward()` keep its kernel provenance.

        Inductor writes the provenance mapping only while `debug._pre_grad_graph_id` is set, and
        sets it inside the forward compile's `reset_provenance_globals()`, which restores it on
        exit. AOT autograd compiles the backward graph later, outside that block, where it is
        None: every backward kernel would come without its fused ops and their lines. Any
        truthy id outside the block keeps the mapping; compiles inside set their own.
        """
        import torch._inductor.debug as inductor_debug

        if getattr(inductor_debug, "_pre_grad_graph_id", 0):  # set already, or a torch without it
            return
        self._set(inductor_debug, "_pre_grad_graph_id", _BACKWARD_GRAPH_ID)

    def _set(self, owner: Any, name: str, value: Any) -> None:
        self._restores.callback(setattr, owner, name, getattr(owner, name))
        setattr(owner, name, value)

    def _patch(self, owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        # The class's own attribute (a function), not the bound or inherited one `getattr` gives.
        original = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else getattr(owner, name)
        self._restores.callback(setattr, owner, name, original)
        setattr(owner, name, make(getattr(owner, name)))

    def _wrap_compile_fx(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def compile_fx(model: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
            # The dynamo graph: its nodes carry nn_module_stack, on warm cache hits too.
            meta = {n.name: dict(n.meta) for n in getattr(getattr(model, "graph", None), "nodes", [])}
            capture._pre_grad_stack.append(meta)
            try:
                return original(model, example_inputs, *args, **kwargs)
            finally:
                capture._pre_grad_stack.pop()

        return compile_fx

    def _wrap_post_compile(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def post_compile(compiled: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(compiled, *args, **kwargs)
            try:
                capture._instrument(compiled)
            except Exception as e:  # noqa: BLE001 - never break the user's program over a trace
                print(f"tracediff: could not instrument inductor kernels ({type(e).__name__}: {e})", file=sys.stderr)
            return result

        return post_compile

    # -- instrumenting one compiled graph ------------------------------------------

    def _instrument(self, compiled: Any) -> None:
        runner = getattr(compiled, "compiled_fn_runner", None)
        if runner is not None:
            namespace = type(runner).call.__globals__
        else:
            namespace = getattr(getattr(compiled, "current_callable", None), "__globals__", None)
        if namespace is None:
            return
        info = build_graph_kernels(compiled, self._pre_grad_stack[0] if self._pre_grad_stack else {})
        wrapper_file = namespace.get("__file__")
        if wrapper_file:
            # Extern kernels (aten::mm.out) are dispatched from the wrapper: their source
            # line is the one inductor's provenance gives for that call site.
            # Every extern op of every call asks: each line is worked out once.
            self.recorder.sources.register_generated(wrapper_file, functools.cache(functools.partial(_site_source, info)))
        for name, params in info.params.items():
            kernel = namespace.get(name)
            if callable(kernel) and not getattr(kernel, "_tracediff_kernel", False):
                namespace[name] = self._cpp_launcher(kernel, name, params, info)
        for name, value in list(namespace.items()):
            if type(value).__name__ in ("CachingAutotuner", "StaticTritonCompileResult") or hasattr(value, "triton_meta"):
                self._triton[identity(value)] = (info, name)

    def _cpp_launcher(self, kernel: Callable[..., Any], name: str, params: list[str], info: GraphKernels) -> Callable[..., Any]:
        capture = self

        def launch(*args: Any) -> Any:
            site = info.site_handles.get(sys._getframe(1).f_lineno)
            return capture._record_launch(kernel, name, site, info, list(zip(params, args)), args, {})

        launch._tracediff_kernel = True  # type: ignore[attr-defined]
        return launch

    def _wrap_triton_run(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def run(autotuner: Any, *args: Any, **kwargs: Any) -> Any:
            known = capture._triton.get(identity(autotuner))
            if known is None:
                return original(autotuner, *args, **kwargs)
            info, name = known
            site = info.site_handles.get(sys._getframe(1).f_lineno)
            arg_names = capture._triton_arg_names.get(identity(autotuner))
            if arg_names is None:
                arg_names = capture._triton_arg_names[identity(autotuner)] = _triton_arg_names(autotuner)
            return capture._record_launch(lambda *a, **k: original(autotuner, *a, **k), name, site, info,
                                          list(zip(arg_names, args)), args, kwargs)

        return run

    # -- one launch ------------------------------------------------------------------

    def _record_launch(self, kernel: Callable[..., Any], name: str, site: str | None, info: GraphKernels,
                       named: list[tuple[str, Any]], args: tuple, kwargs: dict) -> Any:
        recorder = self.recorder
        if recorder.internal or not recorder.records_here():
            return kernel(*args, **kwargs)
        tensors = [(n, a) for n, a in named if isinstance(a, torch.Tensor)]
        recorder.link_kernel_buffers(a for _, a in tensors)
        inputs = recorder.describe_tensors([(n, a) for n, a in tensors if not n.startswith("out_ptr")])
        written = [(n, a) for n, a in tensors if is_written_argument(n)]
        recorder.before_writes([a for _, a in written])  # it may write what is queued (a reused buffer, an in-place argument)
        # A first Triton launch autotunes: its benchmark ops are not the program's.
        result = recorder.call_quietly(kernel, args, kwargs)
        outputs = recorder.describe_tensors(written, written=True)
        fuses, source = self._fused_records(info, name, site, recorder.region_root)
        recorder.write_kernel(name, site, info.graph, fuses, inputs, outputs, source)
        return result

    def _fused_records(self, info: GraphKernels, name: str, site: str | None,
                       root: str | None) -> tuple[list[dict[str, Any]], FusedSource]:
        """The records of the ops a launch fuses and their source, shared by every launch from that site
        (nothing changes a record once made)."""
        key = (identity(info), name, site, root)
        known = self._fused.get(key)
        if known is None:
            fuses = [op.as_record(root) for op in info.fused_ops(name, site)]
            known = self._fused[key] = (info, fuses, fused_source(fuses))
        return known[1], known[2]


def _triton_arg_names(autotuner: Any) -> list[str]:
    """A Triton kernel's argument names, those it writes named as outputs (`in_out_` prefixed where inductor
    named them otherwise), so the launch's record reads them after it."""
    arg_names = list((getattr(autotuner, "triton_meta", None) or {}).get("signature", {}).keys())
    mutated = set((getattr(autotuner, "inductor_meta", None) or {}).get("mutated_arg_names", ()))
    return [n if n not in mutated or is_written_argument(n) else f"in_out_{n}" for n in arg_names]


def _site_source(info: GraphKernels, line: int) -> SourceLocation | None:
    handle = info.site_handles.get(line)
    for op in reversed(info.fuses.get(handle or "", [])):
        if op.path and op.line:
            return SourceLocation(op.path, op.line, linecache.getline(op.path, op.line).strip())
    return None


def fused_source(fuses: list[dict[str, Any]]) -> FusedSource:
    """The source of the last fused op with a line: the one whose value the kernel writes."""
    for op in reversed(fuses):
        if op.get("path"):
            path = op["path"]
            line = int(op["src"].rsplit(":", 1)[1])
            return FusedSource(op["src"], path, linecache.getline(path, line).strip(), op.get("m"))
    return FusedSource(module=fuses[-1].get("m") if fuses else None)
