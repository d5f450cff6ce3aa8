"""Op names as traces spell them, pinned against torch's own `OpOverload.name()` and `str()`."""

from __future__ import annotations

import torch

from tracediff.op_names import base_op, from_target, is_in_place, op_name, packet, parts, short


def test_an_overloads_name_is_torchs_own() -> None:
    assert op_name(torch.ops.aten.cos.default) == "aten::cos"
    assert op_name(torch.ops.aten.addmm.out) == "aten::addmm.out"
    assert op_name(torch.ops.aten.add_.Tensor) == "aten::add_.Tensor"


def test_the_repro_calls_an_op_by_the_path_str_gives() -> None:
    """repro/capture.py stores `str(func)`; the repro script calls `torch.ops.<that>`."""
    for func in (torch.ops.aten.cos.default, torch.ops.aten.addmm.out):
        namespace, name, overload = str(func).split(".")
        assert getattr(getattr(getattr(torch.ops, namespace), name), overload) is func


def test_an_fx_target_reads_as_the_trace_names_it() -> None:
    assert from_target("aten.sin.default") == "aten::sin"
    assert from_target("aten.add.Tensor") == "aten::add.Tensor"
    assert from_target(str(torch.ops.aten.addmm.default)) == op_name(torch.ops.aten.addmm.default)


def test_the_parts_of_a_name() -> None:
    assert parts("aten::add.Tensor") == ("aten", "add", "Tensor")
    assert parts("aten::cos") == ("aten", "cos", "default")
    assert packet("aten::fill_.Scalar") == "aten::fill_"
    assert base_op("aten::add_.Tensor") == "aten::add"
    assert base_op("aten::__and__.Tensor") == "aten::__and__"
    assert is_in_place("aten::mul_.Tensor") and not is_in_place("aten::mul.Tensor")
    assert short("aten::addmm.out") == "addmm"
