"""Every script of fixtures/clean/ matches under inductor (tests/clean_scripts.py says why and how)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clean_scripts import assert_matches, batched_checks, params
from tracediff.trace.reader import read_trace

checked = batched_checks("inductor", "test_matches_under_inductor")


@pytest.mark.slow
@pytest.mark.parametrize("script", params("inductor"))
def test_matches_under_inductor(script: str, checked) -> None:
    assert_matches(checked(script))


@pytest.mark.slow
def test_kernels_say_which_op_each_fused_node_came_from(checked) -> None:
    """record/original_aten.py: the batch norm and ReLU backward kernel's decomposed nodes (`le`, `where`,
    `sub`, `mul`) carry the ops they were decomposed from, and the recorder's own post-grad pass is not taken
    for a pass of the script's (which `tracediff fix` would offer to drop)."""
    result = checked("channels_last_cnn.py")
    assert_matches(result)
    trace, records = read_trace(Path(json.loads(result.stdout)["traces"][1]))
    fused = [f for r in records if r["t"] == "kernel" for f in r["fuses"]]
    origins = {f.get("orig") for f in fused}
    assert {"aten::threshold_backward", "aten::native_batch_norm_backward"} <= origins, origins
    assert {f["op"] for f in fused if f.get("orig") == "aten::threshold_backward"} >= {"aten::le.Scalar"}
    assert trace.footer is not None and trace.footer["compiler_customizations"]["passes"] == []
