"""Render the standalone repro script: captured ops -> Python source text.

Pure: no torch state is touched here. The script needs only torch (and the
script's own modules copied beside it); it must run where tracediff is not
installed, so nothing below may import tracediff.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from tracediff.errors import UserError
from tracediff.repro.capture import OutputRef


@dataclass
class ReproSpec:
    """What the script says and does, already decided by the writer."""

    ops: list[dict[str, Any]]  # captured: {"index", "op", "args", "kwargs"}; tensors replaced by input names
    input_names: list[str]
    backend: str
    local_modules: list[str]
    fallback_random: bool
    rtol: float
    atol: float
    title: str  # "aten::cos at model.py:42"
    context: list[str] = field(default_factory=list)  # docstring lines about the recorded divergence
    comments: dict[int, str] = field(default_factory=dict)  # op index -> source comment
    returns: list[str] = field(default_factory=list)  # expressions returned by program()


class InputName(str):
    """A tensor argument that comes from inputs.pt (rendered as a bare name)."""


def render_value(value: Any) -> str:
    """Python source for one argument value as the op received it."""
    if isinstance(value, InputName):
        return str(value)
    if isinstance(value, OutputRef):
        return f"v{value.index}" if value.position is None else f"v{value.index}[{value.position}]"
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else '-float("inf")'
        return repr(value)
    if isinstance(value, complex):
        return f"complex({render_value(value.real)}, {render_value(value.imag)})"
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)  # "torch.float32", "torch.strided", "torch.contiguous_format"
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, list):
        return "[" + ", ".join(render_value(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(render_value(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    raise UserError(f"an argument of type {type(value).__name__} cannot be written into a repro script")


def _call(op: dict[str, Any]) -> str:
    args = [render_value(a) for a in op["args"]]
    args += [f"{k}={render_value(v)}" for k, v in op["kwargs"].items()]
    return f"torch.ops.{op['op']}({', '.join(args)})"


def render_program(spec: ReproSpec) -> str:
    lines = [f"def program({', '.join(spec.input_names)}):",
             '    """The recorded op(s), in the order they were dispatched."""']
    for op in spec.ops:
        comment = spec.comments.get(op["index"])
        lines.append(f"    v{op['index']} = {_call(op)}" + (f"  # {comment}" if comment else ""))
    returned = spec.returns or [f"v{spec.ops[-1]['index']}"]
    lines.append(f"    return {returned[0]}" if len(returned) == 1 else f"    return ({', '.join(returned)})")
    return "\n".join(lines)


def render_script(spec: ReproSpec) -> str:
    context = "\n".join(spec.context)
    return _TEMPLATE.format(
        title=spec.title,
        context=context,
        backend=repr(spec.backend),
        local_modules=repr(spec.local_modules),
        fallback_random=spec.fallback_random,
        rtol=spec.rtol,
        atol=spec.atol,
        input_names=repr(spec.input_names),
        program=render_program(spec),
    )


_TEMPLATE = '''#!/usr/bin/env python3
"""Standalone repro, written by tracediff: {title}.

{context}

Runs the op(s) in `program` on the saved inputs (inputs.pt, beside this file)
in plain eager and under torch.compile with BACKEND, prints both results and
their difference, and exits 1 while they differ beyond RTOL/ATOL, 0 when they
agree, 3 when it fails to run. Needs only torch (and any module copied beside
this file).

    python repro.py                    # the backend of the recorded run
    python repro.py --backend eager    # control: no compilation, always agrees
    python repro.py --device cuda      # run the inputs on another device
"""

import argparse
import importlib
import os
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND = {backend}
# Modules the recorded script imported from its own folder, copied beside this
# file and imported first: importing them may change the compiler (a custom
# backend, a registered decomposition or graph pass).
LOCAL_MODULES = {local_modules}
FALLBACK_RANDOM = {fallback_random}  # inductor calls eager's random ops, as in the recorded run
RTOL, ATOL = {rtol!r}, {atol!r}  # the tolerance tracediff judged the divergence by
INPUT_NAMES = {input_names}


{program}


def resolve_backend(name):
    """What torch.compile takes for a backend name as tracediff spells it (None: no compilation)."""
    if name == "eager":
        return None
    if name == "dynamo":
        return "eager"
    if ":" in name:
        module_name, _, attr = name.partition(":")
        target = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
        return target
    return name


def tensors(result):
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [t for item in result for t in tensors(item)]
    return []


def summary(t):
    values = t.detach().flatten()[:6].tolist()
    if not (t.is_floating_point() or t.is_complex()):
        return f"{{t.dtype}} {{list(t.shape)}} first {{values}}"
    t64 = t.detach().to(torch.complex128 if t.is_complex() else torch.float64)
    return (f"{{t.dtype}} {{list(t.shape)}} sum={{t64.sum().item():.6g}} "
            f"nan={{int(t64.isnan().sum())}} first {{[round(v, 6) if isinstance(v, float) else v for v in values]}}")


def agree(expected, actual):
    """(they agree, one line on their difference)."""
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return False, f"shape/dtype differ: {{expected.dtype}}{{list(expected.shape)}} vs {{actual.dtype}}{{list(actual.shape)}}"
    if not (expected.is_floating_point() or expected.is_complex()):
        equal = torch.equal(expected, actual)
        return equal, "equal" if equal else f"{{int((expected != actual).sum())}} element(s) differ"
    e, a = expected.detach().double().cpu(), actual.detach().double().cpu()
    same_nan = torch.equal(e.isnan(), a.isnan())
    finite = ~(e.isnan() | a.isnan())
    abs_diff = (e - a).abs()[finite]
    max_abs = abs_diff.max().item() if abs_diff.numel() else 0.0
    rel = (abs_diff / e.abs()[finite].clamp_min(ATOL)) if abs_diff.numel() else abs_diff
    max_rel = rel.max().item() if rel.numel() else 0.0
    ok = same_nan and torch.allclose(e, a, rtol=RTOL, atol=ATOL, equal_nan=True)
    nan_note = "" if same_nan else f", NaN in {{int(e.isnan().sum())}} vs {{int(a.isnan().sum())}} elements"
    return ok, f"max abs diff {{max_abs:.6g}}, max rel diff {{max_rel:.6g}}{{nan_note}}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--backend", default=BACKEND, help=f"torch.compile backend (default: {{BACKEND}}); eager: none")
    parser.add_argument("--device", default=None, help="move the inputs to this device (default: where they were)")
    options = parser.parse_args()

    sys.path.insert(0, HERE)
    for name in LOCAL_MODULES:
        importlib.import_module(name)
    if FALLBACK_RANDOM:
        importlib.import_module("torch._inductor.config").fallback_random = True
    saved = torch.load(os.path.join(HERE, "inputs.pt"), weights_only=True, map_location=options.device)
    inputs = [saved[name] for name in INPUT_NAMES]

    backend = resolve_backend(options.backend)
    compiled = program if backend is None else torch.compile(program, backend=backend)
    with torch.no_grad():
        torch.manual_seed(0)
        expected = tensors(program(*[t.clone() for t in inputs]))
        torch.manual_seed(0)
        actual = tensors(compiled(*[t.clone() for t in inputs]))

    diverged = False
    for n, (e, a) in enumerate(zip(expected, actual)):
        ok, difference = agree(e, a)
        diverged |= not ok
        print(f"output {{n}}:")
        print(f"  eager:            {{summary(e)}}")
        print(f"  {{options.backend + ':':<17s}} {{summary(a)}}")
        print(f"  {{'AGREE' if ok else 'DIFFER'}}: {{difference}} (rtol={{RTOL}}, atol={{ATOL}})")
    if len(expected) != len(actual):
        print(f"eager returned {{len(expected)}} tensor(s), {{options.backend}} returned {{len(actual)}}")
        diverged = True
    print("REPRODUCED: the outputs differ" if diverged else "not reproduced: the outputs agree")
    return 1 if diverged else 0


if __name__ == "__main__":
    try:
        status = main()
    except Exception:  # exit 1 means "reproduced": a crash must not look like it
        traceback.print_exc()
        status = 3
    sys.exit(status)
'''
