"""Backend names as users type them, resolved to what `torch.compile` takes.

  eager              no compilation at all: torch.compile returns the function unchanged
  dynamo             torch.compile(backend="eager"): graph capture only
  aot_eager, inductor, ...   any registered torch.compile backend
  pkg.module:attr    a custom backend callable, imported
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracediff.errors import UserError

EAGER = "eager"
DYNAMO = "dynamo"
# Registered torch.compile backends that never call inductor: a recording under one need not import it.
_WITHOUT_INDUCTOR = frozenset({"eager", "aot_eager", "aot_eager_decomp_partition", "aot_eager_default_partitioner"})
# Backends every supported torch registers (tests/test_torch_pins.py checks): naming one is checked without
# importing dynamo, which costs the parent of `tracediff run` two seconds before its first recording starts.
_ALWAYS_REGISTERED = _WITHOUT_INDUCTOR | {"inductor"}


@dataclass(frozen=True)
class Backend:
    """A resolved backend: its user-facing name and what torch.compile gets (None: don't compile)."""

    name: str
    compile_backend: str | Callable[..., Any] | None

    @property
    def compiles(self) -> bool:
        return self.compile_backend is not None

    @property
    def is_inductor(self) -> bool:
        return self.compile_backend == "inductor"

    @property
    def may_run_inductor(self) -> bool:
        """Whether compiling with it may run inductor's generated code: not for no compilation or a backend
        known to stop before inductor; a custom backend may call inductor itself."""
        return self.compiles and not (isinstance(self.compile_backend, str) and self.compile_backend in _WITHOUT_INDUCTOR)


def resolve_backend(name: str) -> Backend:
    """Turn a user's backend name into a `Backend`; one-line UserError if it does not exist."""
    name = name.strip()
    if not name:
        raise UserError("empty backend name; use e.g. eager, dynamo, aot_eager, inductor or pkg.module:attr")
    if name == EAGER:
        return Backend(name, None)
    if name == DYNAMO:
        return Backend(name, "eager")
    if ":" in name:
        return Backend(name, _import_callable(name))
    if name in _ALWAYS_REGISTERED:
        return Backend(name, name)
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if name not in known:
        # The ones people use: torch's listed backends and the aot_eager family; not its debug and test-only ones.
        usual = set(torch._dynamo.list_backends()) | {k for k in known if k.startswith("aot_eager")}
        raise UserError(
            f"unknown backend {name!r}; known: eager, dynamo, {', '.join(sorted(usual - {EAGER}))}, "
            "or pkg.module:attr (torch's debug backends too: torch._dynamo.list_backends(exclude_tags=()))"
        )
    return Backend(name, name)


def _import_callable(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UserError(f"backend {spec!r}: cannot import module {module_name!r} ({e})") from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UserError(f"backend {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise UserError(f"backend {spec!r}: {attr!r} is not callable")
    return target
