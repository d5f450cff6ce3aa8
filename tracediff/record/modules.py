"""Which nn.Module an op runs in, forward and backward, without holding the autograd graph.

Forward: global module forward hooks keep a stack of module paths
(`Net.block.act`, named from the root module down, as torch's ModTracker
names them). Backward: every autograd node made during a module's forward
gets a sequence number; when a module call ends it claims the numbers made
inside it that no inner module claimed, and a backward op looks up the
number of the node being executed (`torch._C._current_autograd_node()`).

torch's ModTracker follows backward with grad hooks on module inputs and
outputs instead; without a backward (an eval loop with autograd on) those
hooks never fire and keep every forward's graph alive (pytorch#139214).
Nothing here holds a tensor or a graph node.

Module hooks do not run inside compiled code: there the module path comes
from the FX graph (record/source).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from types import ModuleType
from typing import Any

import torch

from tracediff.record.after_import import AfterImport

# Sequence numbers remembered for backward attribution: a forward's worth, and more.
_SEQUENCE_WINDOW = 1_000_000


def _never() -> bool:
    return False


class ModuleStack:
    """The innermost active module path; all state on the instance, hooks removed on exit."""

    def __init__(self) -> None:
        self._names: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()
        # (module path, first sequence number of its call, the module: what its exit hook matches by identity)
        self._stack: list[tuple[str, int, torch.nn.Module]] = []
        self._by_sequence: OrderedDict[int, str] = OrderedDict()
        self._handles: list[Any] = []
        # Module calls on other threads are not this recording's (the dispatch mode is thread-local).
        self._thread: int | None = None
        # The compiled-module wrappers the stack passes over, and dynamo's "inside one" check: dynamo's are added
        # once dynamo is imported (`_know_dynamo`), not looked up per module call.
        self._optimized_module: type | tuple[type, ...] = UncompiledModule
        self._in_optimized_module: Any = _never
        self._dynamo_known = AfterImport("torch._dynamo", self._know_dynamo)

    # -- names ----------------------------------------------------------------------

    def name_of(self, module: torch.nn.Module) -> str:
        """`Net` for a root module, `Net.block.act` for its descendants."""
        name = self._names.get(module)
        if name is None:
            name = type(module).__name__
            self._names[module] = name
            for child_path, child in module.named_modules(prefix=name):
                if child is not module:
                    self._names.setdefault(child, child_path)
        return name

    def alias(self, wrapper: torch.nn.Module, wrapped: torch.nn.Module) -> None:
        """Name `wrapper` (an OptimizedModule) like the module it wraps."""
        self._names[wrapper] = self.name_of(wrapped)

    # -- hooks ------------------------------------------------------------------------

    def _ignored(self, module: torch.nn.Module) -> bool:
        """A module call that is not this recording's: on another thread (the dispatch mode is thread-local, so
        that thread's ops are not recorded either), or one dynamo is tracing (module hooks do not run in compiled
        code; dynamo cannot trace a thread id); or a compiled module's wrapper, or a call inside one."""
        return (torch.compiler.is_compiling() or threading.get_ident() != self._thread
                or isinstance(module, self._optimized_module) or self._in_optimized_module())

    def _enter(self, module: torch.nn.Module, _inputs: Any) -> None:
        if self._ignored(module):
            return
        self._stack.append((self.name_of(module), torch._C._autograd._get_sequence_nr(), module))

    def _exit(self, module: torch.nn.Module, _inputs: Any, _outputs: Any) -> None:
        if not self._stack or self._ignored(module):
            return
        # Pop to this module's entry (a module that raised may have left inner entries behind).
        while self._stack:
            name, first, entered = self._stack.pop()
            if entered is module:
                break
        else:
            return
        # Inner modules exited first and claimed their numbers; the rest are this module's.
        for sequence in range(first, torch._C._autograd._get_sequence_nr()):
            if sequence not in self._by_sequence:
                self._by_sequence[sequence] = name
        while len(self._by_sequence) > _SEQUENCE_WINDOW:
            self._by_sequence.popitem(last=False)

    # -- queries ----------------------------------------------------------------------

    @property
    def current(self) -> str | None:
        return self.current_at(torch._C._current_autograd_node())

    def current_at(self, node: Any) -> str | None:
        """`current`, given the autograd node being executed (`torch._C._current_autograd_node()`)."""
        if node is not None:  # backward: the module whose forward made this node
            return self._by_sequence.get(node._sequence_nr())
        return self._stack[-1][0] if self._stack else None

    @property
    def depth(self) -> int:
        return len(self._stack)

    @property
    def in_backward(self) -> bool:
        return torch._C._current_autograd_node() is not None

    def __enter__(self) -> ModuleStack:
        from torch.nn.modules import module as module_hooks

        self._thread = threading.get_ident()
        self._dynamo_known.__enter__()
        self._handles = [
            module_hooks.register_module_forward_pre_hook(self._enter),
            module_hooks.register_module_forward_hook(self._exit, always_call=True),
        ]
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._dynamo_known.__exit__(*exc)
        self._stack.clear()

    def _know_dynamo(self, dynamo: ModuleType) -> None:
        """Dynamo's compiled module, ignored as the wrapper it is, once dynamo is imported (`AfterImport`: not
        before, which costs an eager recording a second)."""
        eval_frame = dynamo.eval_frame
        self._optimized_module = (eval_frame.OptimizedModule, UncompiledModule)
        self._in_optimized_module = getattr(eval_frame, "_is_in_optimized_module", _never)


class UncompiledModule(torch.nn.Module):
    """What `torch.compile(module)` gives under a backend that compiles nothing (`eager`, `tracediff fix`'s "no
    compile"): a module around the user's, as torch's OptimizedModule is, so that only calls made through it are
    the compiled region's calls, as under a backend that compiles; the user's module called directly is not one.
    The module stack passes over it as over an OptimizedModule (`ModuleStack`)."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self._orig_mod = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._orig_mod(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_orig_mod":
                raise
            return getattr(self._orig_mod, name)
