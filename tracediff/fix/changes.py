"""The changes `tracediff fix` tries: what each is, how the child applies it, and the patch a user pastes.

A `Change` is plain data (it travels to the child process as JSON). Each kind
knows three things: its words in the report, how far it reaches (the search
tries the most local first), and the lines of Python that make the same change
in the user's own script. `apply` (the child's side) is in fix/apply.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from tracediff.op_names import parts

# Kinds, most local first: the script's own compiler customization for the op found, a knob the compiler
# bisector names, higher precision, no fusion around the op, its module uncompiled, nothing compiled.
DROP_DECOMPOSITION = "drop_decomposition"
DROP_LOWERING = "drop_lowering"
DROP_PASS = "drop_pass"
INDUCTOR_CONFIG = "inductor_config"
MATMUL_PRECISION = "matmul_precision"
FLOAT32_MODULE = "float32_module"
FALLBACK = "fallback"
DISABLE_MODULE = "disable_module"
NO_COMPILE = "no_compile"
KINDS = (DROP_DECOMPOSITION, DROP_LOWERING, DROP_PASS, INDUCTOR_CONFIG, MATMUL_PRECISION, FLOAT32_MODULE, FALLBACK,
         DISABLE_MODULE, NO_COMPILE)

# What a change that works says about the difference it removed.
CUSTOMIZATION = "customization"  # the script's own decomposition, lowering or pass computes differently
ROUNDING = "rounding"  # expected: the compiled code rounds differently (more or less precision)
COMPILER = "compiler"  # looks like a compiler bug: report it upstream


def torch_op(op: str) -> str:
    """`aten::cos` -> `torch.ops.aten.cos.default`: how Python names the op's overload."""
    namespace, name, overload = parts(op)
    return f"torch.ops.{namespace}.{name}.{overload}"


@dataclass(frozen=True)
class Change:
    """One change to try. `target`: the op (`aten::cos`), config setting, or module path it is about;
    `value`: the setting's new value, where it has one."""

    kind: str
    target: str = ""
    value: Any = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Change:
        if d.get("kind") not in KINDS:
            raise ValueError(f"unknown change kind {d.get('kind')!r}")
        return cls(d["kind"], d.get("target") or "", d.get("value"))

    @property
    def reach(self) -> int:
        """How much of the program it changes: the search tries lower reaches first."""
        return KINDS.index(self.kind)

    @property
    def changes_eager(self) -> bool:
        """Whether the patch changes the script's eager numbers too (a precision setting does; a compiler
        setting does not): then the eager reference is recorded again with it."""
        return self.kind in (MATMUL_PRECISION, FLOAT32_MODULE)

    @property
    def nature(self) -> str:
        if self.kind in (DROP_DECOMPOSITION, DROP_LOWERING, DROP_PASS):
            return CUSTOMIZATION
        if self.kind in (MATMUL_PRECISION, FLOAT32_MODULE) or (
                self.kind == INDUCTOR_CONFIG and self.target == "emulate_precision_casts"):
            return ROUNDING
        return COMPILER

    def describe(self) -> str:
        """The change in words: `drop the decomposition the script registered for aten::cos`."""
        return {
            DROP_DECOMPOSITION: f"drop the decomposition the script registered for {self.target}",
            DROP_LOWERING: f"drop the lowering the script registered for {self.target}",
            DROP_PASS: f"turn off the script's graph pass (inductor config {self.target})",
            INDUCTOR_CONFIG: f"inductor config {self.target} = {self.value!r}",
            MATMUL_PRECISION: "float32 matmuls in full precision (no TF32)",
            FLOAT32_MODULE: f"module {self.target} kept in float32 under autocast",
            FALLBACK: f"no fusion around {self.target}: inductor calls eager's kernel for it",
            DISABLE_MODULE: f"compile disabled on module {self.target}",
            NO_COMPILE: "nothing compiled (the compiled function runs eagerly)",
        }[self.kind]

    def patch(self, compiled: str = "model") -> list[str]:
        """Lines of Python that make this change in the script. `compiled`: the expression the script
        passes to `torch.compile` (where the change names a module inside it)."""
        if self.kind == DROP_DECOMPOSITION:
            return ["import torch._inductor.decomposition",
                    f"torch._inductor.decomposition.decompositions.pop({torch_op(self.target)}, None)"
                    "  # after the script registers it, before the first compiled call"]
        if self.kind == DROP_LOWERING:
            return ["import torch._inductor.lowering",
                    f"torch._inductor.lowering.lowerings.pop({torch_op(self.target)}, None)"
                    "  # after the script registers it, before the first compiled call"]
        if self.kind == DROP_PASS:
            return ["import torch._inductor.config", f"torch._inductor.config.{self.target} = None"]
        if self.kind == INDUCTOR_CONFIG:
            return ["import torch._inductor.config", f"torch._inductor.config.{self.target} = {self.value!r}"]
        if self.kind == MATMUL_PRECISION:
            return ['torch.set_float32_matmul_precision("highest")', "torch.backends.cuda.matmul.allow_tf32 = False",
                    "torch.backends.cudnn.allow_tf32 = False"]
        if self.kind == FALLBACK:
            op = torch_op(self.target)
            return ["import torch._inductor.decomposition, torch._inductor.lowering",
                    f"torch._inductor.decomposition.decompositions.pop({op}, None)",
                    f"torch._inductor.lowering.make_fallback({op}, warn=False, override_decomp=True)"]
        path = self.target.partition(".")[2]  # a module target starts with the compiled root's class name
        module = f"{compiled}.{path}" if path else compiled
        if self.kind == FLOAT32_MODULE:
            return [f"_forward = {module}.forward",
                    "def _in_float32(*args, **kwargs):  # autocast off, half-precision inputs widened",
                    "    args, kwargs = torch.utils._pytree.tree_map(lambda t: t.float() if torch.is_tensor(t) and "
                    "t.dtype in (torch.bfloat16, torch.float16) else t, (args, kwargs))",
                    "    with torch.autocast(\"cuda\", enabled=False), torch.autocast(\"cpu\", enabled=False):",
                    "        return _forward(*args, **kwargs)",
                    f"{module}.forward = _in_float32"]
        if self.kind == DISABLE_MODULE:
            return [f"{module}.forward = torch.compiler.disable({module}.forward)  # before the first compiled call"]
        return [f"# drop torch.compile: call {compiled} itself (or {compiled} = torch.compiler.disable({compiled}))"]


def encode(changes: list[Change]) -> str:
    """The changes as the child's `--fix` argument."""
    return json.dumps([c.to_json() for c in changes])


def decode(text: str) -> list[Change]:
    return [Change.from_json(d) for d in json.loads(text)]
