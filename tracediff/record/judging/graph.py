"""One compiled graph, judged call by call on its own inputs.

Each call runs three times on the same input values: the float64 reference (the uncompiled graph under
`Float64Upcast`), eager (the uncompiled graph), and the compiled code, last and on the program's real tensors,
so the program goes on exactly as it would have. Each reference starts from the random generators' state the
call started from, and the state is put back before the compiled code runs. Inputs the graph writes in place
(BatchNorm's running statistics, an optimizer's parameters and state) are found on the graph's first call
(the float64 reference runs on copies of everything then) and copied for each reference from then on; nothing
else is copied.

Every output is compared (`measure.py`): the tensors returned, the inputs written in place, integer and bool
results exactly, dtypes and shapes. Under autograd, the gradients the compiled backward computes for the
call's inputs are compared too: an identity `autograd.Function` on those inputs receives the compiled
backward's gradients, a hook on the outputs the gradients fed into it, and the uncompiled graph is re-run from
the forward's inputs and random state to differentiate the references with the same incoming gradients.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch.utils._pytree import tree_flatten

from tracediff.judge.measure import Measurement, any_wrong, carrying, measure
from tracediff.record.judging.checkpoints import with_checkpoints_inlined
from tracediff.record.judging.policy import JudgePolicy
from tracediff.record.judging.shared_grads import passed_on
from tracediff.record.op_arguments import tensor_version
from tracediff.record.source import SourceLocation
from tracediff.record.upcast import Float64Upcast


class CheckSink(Protocol):
    """Where checks go: the recorder (record/mode.py)."""

    def write_check(self, record: dict[str, Any]) -> None: ...

    def quiet(self) -> contextlib.AbstractContextManager[None]: ...

    def records_here(self) -> bool: ...

    @property
    def region_call(self) -> tuple[str, int] | None: ...

    @property
    def region_root(self) -> str | None: ...

    def user_line(self) -> SourceLocation | None: ...


# Narrows a wrong call to the node that makes it wrong (prefix.py): (graph, inputs, rng, tangents) -> culprit.
Narrower = Callable[["JudgedGraph", list[Any], "RngState", "list[torch.Tensor | None] | None"], "dict[str, Any] | None"]


class RngState:
    """The random generators' state (CPU and each CUDA device in use), to start each reference from."""

    def __init__(self) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


_SOURCE_PART = re.compile(r"\[['\"]?([^'\"\]]+)['\"]?\]")


def input_name(placeholder: torch.fx.Node) -> str:
    """What the program calls a graph input: `fc1.weight` for `L['self']._modules['fc1']._parameters['weight']`,
    `x` for `L['x']`; the placeholder's own name where dynamo left no source."""
    attribute = placeholder.meta.get("attribute")
    if attribute:  # a tensor the graph read as its attribute (backend.reference_graph): an optimizer's state, say
        return f"attribute {str(attribute).removeprefix('self___')}"
    source = getattr(placeholder.meta.get("grapharg"), "source", None)
    try:
        text = source.name() if callable(getattr(source, "name", None)) else str(source.name)  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - a source kind without a name: the placeholder's own will do
        return placeholder.name
    if not text or source is None:
        return placeholder.name
    text = _SOURCE_PART.sub(lambda m: "." + m.group(1), text)
    parts = [p for p in text.split(".") if p and p not in ("L", "G", "_modules", "_parameters", "_buffers")]
    if len(parts) > 1 and parts[0] == "self":
        parts = parts[1:]
    return ".".join(parts) or placeholder.name


def unjudgeable(inputs: Sequence[Any]) -> str | None:
    """Why a call cannot be re-run on copies of its inputs, or None: a torch.func transform's wrapped tensors,
    a tensor subclass (DTensor, a nested tensor), a layout a copy does not keep."""
    for t in inputs:
        if not isinstance(t, torch.Tensor):
            continue
        if torch._C._functorch.is_functorch_wrapped_tensor(t):
            return "its inputs are a torch.func transform's (vmap, grad)"
        if type(t) not in (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer):
            return f"an input is a {type(t).__name__}"
        if t.is_sparse or t.is_nested or t.layout != torch.strided or t.is_meta:
            return f"an input has layout {t.layout}" if t.layout != torch.strided else "an input has no plain data"
    return None


def compiled_autograd_runs_the_backward() -> bool:
    """Whether compiled autograd is on (`torch._dynamo.config.compiled_autograd`, or its context manager): it then
    captures the backward, custom `autograd.Function`s' included, and dynamo traces it as a graph of its own. A tap's
    backward (`_InputTap`) would be traced with it, tracediff's judging code compiled into the program's graphs."""
    import torch._dynamo.compiled_autograd as compiled_autograd

    return bool(torch._dynamo.config.compiled_autograd or compiled_autograd.compiled_autograd_enabled)


def _storage_pointer(t: torch.Tensor) -> int | None:
    """The address of the memory `t` views, which tensors sharing it share; None where it has none to share."""
    try:
        pointer = t.untyped_storage().data_ptr()
    except RuntimeError:  # no storage to share (a wrapper subclass)
        return None
    return pointer or None  # an empty storage shares nothing


def _returns_a_view_of(outputs: Sequence[Any], inputs: Sequence[torch.Tensor]) -> bool:
    """Whether an output (of the eager reference, which runs on these very inputs where it does not write them)
    shares memory with one of `inputs`."""
    held = {_storage_pointer(t) for t in inputs} - {None}
    return any(isinstance(o, torch.Tensor) and _storage_pointer(o) in held for o in outputs)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""


def is_float(t: Any) -> bool:
    """A floating or complex tensor: one a float64 reference widens and autograd differentiates."""
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


class Autocast:
    """The autocast state a call ran under, to run its backward's references under it too: a graph compiled
    inside the program's `torch.autocast` block holds no autocast nodes of its own, and `loss.backward()`
    usually runs outside that block."""

    def __init__(self) -> None:
        devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
        self.states = [(device, torch.get_autocast_dtype(device)) for device in devices
                       if torch.is_autocast_enabled(device)]

    @property
    def computes_in(self) -> str | None:
        """The 16-bit dtype autocast computed in (`judge/measure.py`'s `carrying`), None where it was off."""
        return next((str(dtype).removeprefix("torch.") for _, dtype in self.states
                     if dtype in (torch.bfloat16, torch.float16)), None)

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for device, dtype in self.states:
                stack.enter_context(torch.autocast(device, dtype=dtype))
            yield


def _equal(copy: torch.Tensor, original: torch.Tensor) -> bool:
    """Whether a copy still holds the original's values (NaN equal to NaN)."""
    with torch.no_grad():
        try:
            return bool(torch.equal(copy, original) or (copy.is_floating_point() and copy.isnan().any()
                                                        and torch.allclose(copy, original, 0.0, 0.0, equal_nan=True)))
        except RuntimeError:  # a layout torch.equal does not take: as unwritten, as its version says
            return True


def copies(values: Sequence[Any], which: Iterable[int] | None = None) -> list[Any]:
    """`values` with the tensors at `which` (None: all) copied, and every tensor sharing memory with one of them
    copied along, on one copy of that memory: inputs that alias each other (`x` and `x[3:]`) still do, so a
    write through one shows in the other as in the program. The other tensors as they are (detached)."""
    chosen = set(range(len(values))) if which is None else set(which)

    keys = {i: _storage_pointer(t) for i, t in enumerate(values) if isinstance(t, torch.Tensor)}
    copied_keys = {keys[i] for i in chosen if keys.get(i) is not None}
    storages: dict[int, torch.UntypedStorage] = {}
    out = []
    for i, t in enumerate(values):
        if not isinstance(t, torch.Tensor):
            out.append(t)
            continue
        k = keys[i]
        if i not in chosen and (k is None or k not in copied_keys):
            out.append(t.detach())
        elif k is None:
            out.append(t.detach().clone())
        else:
            if k not in storages:
                storages[k] = t.untyped_storage().clone()
            out.append(torch.empty(0, dtype=t.dtype, device=t.device).set_(
                storages[k], t.storage_offset(), t.size(), t.stride()))
    return out


def run_graph(gm: torch.fx.GraphModule, inputs: Sequence[Any], float64: bool = False) -> Any:
    """The uncompiled graph on `inputs`, in the program's precision or as exact float64 math."""
    # `forward`, not the module's `__call__`: the recorder's global module hooks stay out of it.
    with Float64Upcast(exact_casts=True) if float64 else contextlib.nullcontext():
        return gm.forward(*inputs)


def differentiable_leaf(t: torch.Tensor) -> torch.Tensor:
    """A leaf holding `t`'s values to differentiate a reference by."""
    return t.detach().requires_grad_()


def differentiable_inputs(inputs: Sequence[Any], tapped: Sequence[int], upcast: Float64Upcast | None
                          ) -> tuple[list[Any], dict[int, torch.Tensor]]:
    """The inputs to differentiate a reference by, and the leaves among them (those `tapped`). For the float64
    reference (`upcast`) every floating input is widened first: autograd checks the dtypes of some ops'
    arguments (a convolution's input against its weight) before the mode could widen them, and wants a leaf's
    gradient in the leaf's dtype."""
    if upcast is not None:
        inputs = [upcast.widened(a) if is_float(a) else a for a in inputs]
    leaves = {i: differentiable_leaf(inputs[i]) for i in tapped}
    return [leaves.get(i, a) for i, a in enumerate(inputs)], leaves


def outputs_of(result: Any) -> list[Any]:
    return tree_flatten(result)[0]


@dataclass
class _BackwardCheck:
    """What judging one call's backward needs, kept from its forward."""

    call: int
    inputs: list[Any]  # the forward's input values (copies of those the graph writes, the rest as they were)
    versions: dict[int, int | None]  # each tensor input not copied: its version (None: inference-mode), to see a write
    tapped: list[int]  # inputs whose gradients the compiled backward computes
    rng: RngState
    where: tuple[str, int] | None  # the compiled region's call the forward ran in
    autocast: Autocast
    tangents: list[torch.Tensor | None] | None = None  # gradients fed into the compiled backward, per output
    outputs: list[int] = field(default_factory=list)  # outputs, by position, that carry gradients


class _InputTap(torch.autograd.Function):
    """Identity on a call's differentiable inputs: its backward receives the compiled backward's gradients."""

    @staticmethod
    def forward(ctx: Any, graph: JudgedGraph, check: _BackwardCheck, *inputs: torch.Tensor) -> Any:
        ctx.graph, ctx.check = graph, check
        return tuple(t.view_as(t) for t in inputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> Any:
        ctx.graph.judge_backward(ctx.check, list(grads))
        return (None, None, *grads)


# torch._C._functorch's calls that open a transform's level in a graph dynamo traced through `torch.func`.
_TRANSFORM_NESTING = ("_vmap_increment_nesting", "_grad_increment_nesting", "_jvp_increment_nesting",
                      "_func_increment_nesting")


class JudgedGraph:
    """Stands in for one compiled graph: runs it, and judges each call against its references."""

    def __init__(self, reference: torch.fx.GraphModule, compiled: Callable[..., Any], name: str, sink: CheckSink,
                 narrower: Narrower | None = None, attributes: Sequence[torch.Tensor] = (),
                 policy: JudgePolicy | None = None, unjudged_because: str | None = None) -> None:
        # The graph as dynamo gave it, before the backend changed it; the tensors it reads as attributes are
        # its last inputs (backend.reference_graph), `attributes` the program's own.
        self.reference = reference
        self.attributes = list(attributes)
        self.compiled = compiled
        self.name = name
        self.sink = sink
        self.narrower = narrower
        self.policy = policy or JudgePolicy()  # which calls are judged (the light mode's budget), shared by the run
        self.unjudged_because = unjudged_because  # why no call of this graph is judged (backend.py), if none is
        self.calls = 0
        self.site: SourceLocation | None = None  # the program's line that made the latest call
        self.root: str | None = None  # the module the latest call's compiled region belongs to
        self.written: list[int] | None = None  # inputs the graph writes in place, known after its first call
        self.narrowed: set[str] = set()  # phases ("fw", "bw") already narrowed: the first wrong call of each
        self._active = False

    @functools.cached_property
    def runs_a_transform(self) -> str | None:
        """Why the graph cannot be re-run, if it applies a torch.func transform inside (dynamo traces
        `vmap(grad(f))` into one graph): re-run outside the transform's own call, it fails in functorch, and on
        torch 2.11 leaves functorch's layers so that the program's next compiled call fails too."""
        functorch = torch._C._functorch
        nesting = {getattr(functorch, name, None) for name in _TRANSFORM_NESTING} - {None}
        if any(node.op == "call_function" and node.target in nesting for node in self.reference.graph.nodes):
            return "its graph applies a torch.func transform (vmap, grad) inside"
        return None

    @functools.cached_property
    def runnable_reference(self) -> torch.fx.GraphModule:
        """The reference as the references run it: its activation checkpoints inlined (judging/checkpoints.py)."""
        return with_checkpoints_inlined(self.reference)

    @functools.cached_property
    def input_names(self) -> list[str]:
        return [input_name(n) for n in self.reference.graph.find_nodes(op="placeholder")]

    def __call__(self, *args: Any) -> Any:
        if self._active or not self.sink.records_here():
            return self.compiled(*args)
        call = self.calls
        self.calls += 1
        where = self.sink.region_call
        if not self.policy.admits(self.name, call, where):
            return self.compiled(*args)
        self.site = self.sink.user_line()
        self.root = self.sink.region_root
        inputs = [*args, *self.attributes]  # what the reference reads
        reason = self.unjudged_because or self.runs_a_transform or unjudgeable(inputs)
        if reason is not None:
            self._write_unjudged(call, "fw", reason, where)
            return self.compiled(*args)
        rng = RngState()
        try:
            with self._running():
                out64, in64, without64 = self._float64_reference(inputs)
                rng.restore()
                out_e, in_e = self._reference(inputs, float64=False)
                if without64:  # judged against eager alone: eager's output stands for float64's
                    out64, in64 = out_e, in_e
        except Exception as e:  # noqa: BLE001 - tracediff's own failure: the program goes on, the call unjudged
            self._write_unjudged(call, "fw", f"its uncompiled graph raised {type(e).__name__}: {_first_line(e)}", where)
            return self.compiled(*args)
        finally:
            rng.restore()
        assert self.written is not None
        pristine = copies(inputs, self.written) if self.narrower is not None and "fw" not in self.narrowed else None
        check = self._backward_check(call, args, inputs, rng, where)
        if check is not None and _returns_a_view_of(outputs_of(out_e), [args[i] for i in check.tapped]):
            # The program may write into such an output in place, which autograd refuses for a view of the tap's
            # output: no tap, and the backward unjudged.
            self._write_unjudged(call, "bw", "an output is a view of an input that requires gradients: its compiled "
                                 "backward is not tapped", where)
            check = None
        if check is not None and compiled_autograd_runs_the_backward():
            self._write_unjudged(call, "bw", "its backward runs under compiled autograd, in a graph of its own "
                                 "that is not judged: not tapped", where)
            check = None
        call_args = list(args)
        if check is not None:
            tapped = _InputTap.apply(self, check, *(args[i] for i in check.tapped))
            for i, t in zip(check.tapped, tapped):
                call_args[i] = t
        out_c = self.compiled(*call_args)
        flat_c = outputs_of(out_c)
        try:
            with self._running():
                measured = list(self._measure_outputs(flat_c, outputs_of(out_e), outputs_of(out64)))
                measured += [m for i in self.written if (m := measure(
                    f"{self._input_name(i)} (written in place)", inputs[i], in_e[i], in64[i]))]
                measured = carrying(measured, Autocast().computes_in)  # the program's, as the call ran
                culprit = None
                if pristine is not None and any_wrong(measured):
                    self.narrowed.add("fw")
                    culprit = self._narrow(pristine, rng, None)
                self._write(call, "fw", measured, culprit, where, without64)
        except Exception as e:  # noqa: BLE001 - as above
            self._write_unjudged(call, "fw", f"comparing its outputs raised {type(e).__name__}: {_first_line(e)}", where)
        if check is not None:
            self._hook_outputs(check, flat_c, call_args)
        return out_c

    # -- references --------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        """tracediff's own work: nothing recorded, no recursion into this graph, its time counted. A transform
        level a failed re-run left pushed is undone, as dynamo undoes it after a compiled call: the program's next
        call must find functorch as the program left it (graphs that apply a transform are not re-run at all,
        `runs_a_transform`)."""
        self._active = True
        started = time.perf_counter()
        depth = torch._C._functorch.get_dynamic_layer_stack_depth()
        try:
            with self.sink.quiet():
                yield
        finally:
            torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(depth)
            self._active = False
            self.policy.spend(time.perf_counter() - started)

    def _float64_reference(self, inputs: Sequence[Any]) -> tuple[Any, list[Any], str | None]:
        """The float64 reference, or why there is none: some graphs cannot run in float64 (one that runs autograd
        inside, `torch.func.grad`, wants gradients in its leaves' dtype); the call is then judged against eager."""
        try:
            out, written = self._reference(inputs, float64=True)
            return out, written, None
        except Exception as e:  # noqa: BLE001 - the fallback is said in the check record
            return None, [], f"the float64 reference raised {type(e).__name__}: {_first_line(e)}"

    def _reference(self, args: Sequence[Any], float64: bool) -> tuple[Any, list[Any]]:
        """The uncompiled graph on copies of what it writes; on its first call (nothing known yet) on copies of
        every tensor input, and the inputs it wrote are then known."""
        first = self.written is None
        inputs = copies(args, None if first else self.written)
        versions = [tensor_version(t) if isinstance(t, torch.Tensor) else None for t in inputs]
        # In the call's own grad mode (a graph may differentiate inside, `torch.func.grad`): its inputs are
        # detached, so no autograd graph is built for the program's values.
        out = run_graph(self.runnable_reference, inputs, float64)
        if first:
            # A version counter tells most writes; not all (batch_norm writes its running statistics without
            # bumping theirs), so a changed value tells too; it alone for an inference-mode tensor, which has none.
            self.written = [i for i, (t, v, a) in enumerate(zip(inputs, versions, args)) if isinstance(t, torch.Tensor)
                            and (tensor_version(t) != v or not _equal(t, a))]
        return out, inputs

    def _input_name(self, index: int) -> str:
        names = self.input_names
        return names[index] if index < len(names) else f"in{index}"

    def _measure_outputs(self, compiled: list[Any], eager: list[Any], reference: list[Any]) -> Iterator[Measurement]:
        if len(compiled) != len(eager):
            yield Measurement("outputs", "", [], problem=f"{len(compiled)} outputs where eager gives {len(eager)}")
            return
        for i, (c, e, r) in enumerate(zip(compiled, eager, reference)):
            m = measure(f"out{i}", c, e, r)
            if m is not None:
                yield m

    def _narrow(self, inputs: list[Any], rng: RngState, tangents: list[torch.Tensor | None] | None
                ) -> dict[str, Any] | None:
        """The culprit node of a wrong call, the random state as it was after the call put back."""
        if self.narrower is None:
            return None
        after = RngState()
        try:
            return self.narrower(self, inputs, rng, tangents)
        except Exception as e:  # noqa: BLE001 - the search is tracediff's: its failure leaves the call named
            return {"how": "prefix", "note": f"the search over prefixes raised {type(e).__name__}: {_first_line(e)}"}
        finally:
            after.restore()

    def _write_unjudged(self, call: int, phase: str, reason: str, where: tuple[str, int] | None) -> None:
        record: dict[str, Any] = {"g": self.name, "call": call, "ph": phase, "outs": [], "unjudged": reason}
        if where is not None:
            record["rc"] = list(where)
        self.sink.write_check(record)

    def _write(self, call: int, phase: str, measured: list[Measurement], culprit: dict[str, Any] | None,
               where: tuple[str, int] | None, without64: str | None = None) -> None:
        record: dict[str, Any] = {"g": self.name, "call": call, "ph": phase, "outs": [m.as_record() for m in measured]}
        if without64:  # judged against eager alone
            record["no64"] = without64
        if where is not None:  # the compiled region's call this graph ran in: the step, in a training loop
            record["rc"] = list(where)
        if culprit:
            record["culprit"] = culprit
            if not culprit.get("op") and self.site is not None:  # not narrowed: the line that made the call
                record["site"] = {"src": self.site.short, "path": self.site.path, "code": self.site.code}
        self.sink.write_check(record)

    # -- the backward --------------------------------------------------------------------------------------

    def _backward_check(self, call: int, args: Sequence[Any], inputs: Sequence[Any], rng: RngState,
                        where: tuple[str, int] | None) -> _BackwardCheck | None:
        """What judging this call's backward needs, or None where no gradient flows into the compiled code. Only the
        call's arguments are tapped: attributes are read by the compiled code itself."""
        if not torch.is_grad_enabled():
            return None
        written = set(self.written or ())
        tapped = [i for i, a in enumerate(args) if is_float(a) and a.requires_grad and i not in written]
        if not tapped:
            return None
        kept = copies(inputs, written)
        versions = {i: tensor_version(a) for i, a in enumerate(inputs) if isinstance(a, torch.Tensor) and i not in written}
        return _BackwardCheck(call, kept, versions, tapped, rng, where, Autocast())

    def _hook_outputs(self, check: _BackwardCheck, outputs: list[Any], call_args: Sequence[Any]) -> None:
        """Keep the gradients autograd feeds into the compiled backward, output by output. An output whose gradient
        another output's hook receives too (the same tensor twice, a view of another output) keeps none of its
        own: fed into the references at both, that gradient would count twice (shared_grads.py)."""
        carrying_grads = [i for i, t in enumerate(outputs) if is_float(t) and t.requires_grad]
        shared = passed_on(outputs, carrying_grads, call_args)
        check.outputs = [i for i in carrying_grads if i not in shared]
        if not check.outputs:
            return

        tangents: list[torch.Tensor | None] = [None] * len(check.outputs)
        check.tangents = tangents

        def keeper(position: int) -> Callable[[torch.Tensor], None]:
            def keep(grad: torch.Tensor | None) -> None:
                # None: an undefined gradient (the output unused), fed into the backward as zeros.
                tangents[position] = grad.detach() if isinstance(grad, torch.Tensor) else None
            return keep

        # One hook per output: a multi-grad hook never fires for the root of a backward (`loss.backward()`).
        for position, i in enumerate(check.outputs):
            outputs[i].register_hook(keeper(position))

    def _reference_grads(self, check: _BackwardCheck, float64: bool) -> list[torch.Tensor | None]:
        assert check.tangents is not None
        inputs = copies(check.inputs, self.written or ())
        upcast = Float64Upcast(exact_casts=True) if float64 else None
        inputs, leaves = differentiable_inputs(inputs, check.tapped, upcast)
        check.rng.restore()
        with check.autocast.restored(), torch.enable_grad(), upcast or contextlib.nullcontext():
            outs = outputs_of(self.runnable_reference.forward(*inputs))
            pairs = [(outs[i], g) for i, g in zip(check.outputs, check.tangents)
                     if g is not None and isinstance(outs[i], torch.Tensor) and outs[i].requires_grad]
            if not pairs:
                return [None] * len(check.tapped)
            grads = torch.autograd.grad([o for o, _ in pairs], [leaves[i] for i in check.tapped],
                                        [g.to(o.dtype) for o, g in pairs], allow_unused=True)
        return list(grads)

    @staticmethod
    def _backward_inputs(check: _BackwardCheck) -> list[Any]:
        """The forward's inputs, those the backward differentiates for as leaves that require gradients."""
        return [differentiable_leaf(a) if i in check.tapped else a for i, a in enumerate(check.inputs)]

    @staticmethod
    def _tangents_by_output(check: _BackwardCheck) -> list[torch.Tensor | None]:
        """The incoming gradients by output position (None for outputs that carry none)."""
        assert check.tangents is not None
        by_output: list[torch.Tensor | None] = [None] * (max(check.outputs, default=-1) + 1)
        for i, g in zip(check.outputs, check.tangents):
            by_output[i] = g
        return by_output

    def judge_backward(self, check: _BackwardCheck, grads_c: list[torch.Tensor | None]) -> None:
        """Called by the tap with the compiled backward's gradients for the call's inputs."""
        if self._active or check.tangents is None:
            return
        changed = [i for i, v in check.versions.items() if tensor_version(check.inputs[i]) != v]
        if changed:
            return  # an input was written between the forward and the backward: no same-input reference
        after = RngState()
        try:
            with self._running():
                grads_64 = self._reference_grads(check, float64=True)
                grads_e = self._reference_grads(check, float64=False)
                measured = carrying([m for i, c, e, r in zip(check.tapped, grads_c, grads_e, grads_64)
                                     if (m := _measure_grad(f"grad of {self._input_name(i)}", c, e, r))],
                                    check.autocast.computes_in)
                culprit = None
                if self.narrower is not None and "bw" not in self.narrowed and any_wrong(measured):
                    self.narrowed.add("bw")
                    with check.autocast.restored():
                        culprit = self._narrow(self._backward_inputs(check), check.rng, self._tangents_by_output(check))
                self._write(check.call, "bw", measured, culprit, check.where)
        except Exception as e:  # noqa: BLE001 - tracediff's own failure: the backward goes on, unjudged
            self._write_unjudged(check.call, "bw", f"its reference gradients raised {type(e).__name__}: {_first_line(e)}",
                                 check.where)
        finally:
            after.restore()


def _measure_grad(name: str, c: torch.Tensor | None, e: torch.Tensor | None, r: torch.Tensor | None
                  ) -> Measurement | None:
    """A gradient the compiled backward left out (None) is zero, as autograd treats it."""
    if c is None and e is None:
        return None
    like = c if c is not None else e
    assert like is not None
    zeros = torch.zeros_like(like)
    return measure(name, zeros if c is None else c, zeros if e is None else e, zeros if r is None else r)

