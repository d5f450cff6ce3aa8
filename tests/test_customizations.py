"""The footer's `compiler_customizations`: what the script registered in inductor, and nothing of torch's own."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import torch

from tracediff.record.customizations import _registered_outside_torch


def _scripts_cos(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x)


def test_entries_are_judged_by_the_function_behind_partials_and_wrappers() -> None:
    @functools.wraps(_scripts_cos)
    def wrapped(*args: object) -> object:  # as inductor's register_lowering wraps what it is given
        return _scripts_cos(*args)  # type: ignore[arg-type]

    torch_partial = functools.partial(torch.nn.functional.gelu, approximate="tanh")
    table = {torch.ops.aten.cos.default: _scripts_cos, torch.ops.aten.tan.default: wrapped,
             torch.ops.aten.gelu.default: torch_partial,
             torch.ops.aten.exp.default: functools.partial(functools.partial(_scripts_cos)),
             torch.ops.aten.relu.default: torch.relu}
    assert _registered_outside_torch(table) == ["aten::cos", "aten::exp", "aten::tan"]


def test_torch_alone_has_registered_nothing_outside_torch() -> None:
    # A fresh process: other tests in this worker may register decompositions. torch._export.utils
    # fills inductor's table with partials of its own functions (functools' `__module__`).
    code = ("import json, torch, torch._inductor.lowering, torch._inductor.decomposition, torch._export.utils\n"
            "from tracediff.record.customizations import compiler_customizations\n"
            "print(json.dumps(compiler_customizations()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == {"decompositions": [], "lowerings": [], "passes": []}
