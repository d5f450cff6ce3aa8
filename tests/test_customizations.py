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


def test_the_recorders_own_post_grad_pass_is_not_the_scripts() -> None:
    """record/original_aten.py's pass takes `post_grad_custom_post_pass` where the script set none: it is no
    customization of the script's, and dropping the script's passes (`tracediff fix`) keeps it."""
    import torch._inductor.config as inductor_config

    from tracediff.record.customizations import compiler_customizations, without_scripts_passes
    from tracediff.record.original_aten import OriginalAtenAnnotation, with_annotation

    def scripts_pass(graph: torch.fx.Graph) -> None:
        pass

    ours = with_annotation(None)
    assert isinstance(ours, OriginalAtenAnnotation) and with_annotation(scripts_pass) is scripts_pass
    assert without_scripts_passes(ours) is ours and without_scripts_passes(scripts_pass) is None
    with inductor_config.patch(post_grad_custom_post_pass=ours):
        assert compiler_customizations()["passes"] == []
    with inductor_config.patch(post_grad_custom_post_pass=scripts_pass):
        assert compiler_customizations()["passes"] == ["post_grad_custom_post_pass"]
