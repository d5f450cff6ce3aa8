"""Checkpointed random ops keep graph-safe RNG state under CUDA graphs, though a recording sets `fallback_random`
(record/graphsafe_rng.py). The failure it prevents needs CUDA: tests/test_cuda.py runs
fixtures/gpu/cudagraphs_checkpoint_dropout.py, which fails as a plain script once `fallback_random` is set."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config as inductor_config

from tracediff.record.backends import resolve_backend
from tracediff.record.compile_redirect import CompileRedirect
from tracediff.record.graphsafe_rng import GraphSafeRng, asks_for_cuda_graphs

KNOB = "graphsafe_rng_func_ignores_fallback_random"


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, False),
    ({"mode": "default"}, False),
    ({"mode": "reduce-overhead"}, True),
    ({"mode": "max-autotune"}, True),
    ({"mode": "max-autotune-no-cudagraphs"}, False),
    ({"options": {"triton.cudagraphs": True}}, True),
    ({"mode": "reduce-overhead", "options": {"triton.cudagraphs": False}}, False),
])
def test_which_compiles_ask_for_cuda_graphs(kwargs: dict, expected: bool) -> None:
    with inductor_config.patch({"triton.cudagraphs": False}):
        assert asks_for_cuda_graphs(kwargs) is expected


def test_the_global_config_asks_for_cuda_graphs_too() -> None:
    # TORCHINDUCTOR_CUDAGRAPHS=1 sets it when inductor's config is imported.
    with inductor_config.patch({"triton.cudagraphs": True}):
        assert asks_for_cuda_graphs({})


@pytest.mark.parametrize(("fallback_random", "mode", "set_"), [
    (True, "reduce-overhead", True),
    (True, None, False),  # no CUDA graphs: eager's checkpoint numbers are kept
    (False, "reduce-overhead", False),  # graph-safe already
])
def test_the_knob_is_set_only_for_cuda_graphs_under_fallback_random(fallback_random: bool, mode: str | None,
                                                                      set_: bool) -> None:
    with inductor_config.patch({"fallback_random": fallback_random, "triton.cudagraphs": False}):
        rng = GraphSafeRng()
        rng.before_compile({"mode": mode})
        assert getattr(inductor_config.test_configs, KNOB) is set_
        rng.restore()
        assert getattr(inductor_config.test_configs, KNOB) is False


def test_a_redirected_compile_with_reduce_overhead_sets_it_until_the_run_ends() -> None:
    """What the recording does: the script's own torch.compile(mode="reduce-overhead"), redirected to inductor.
    Compiling is lazy: nothing is traced here."""
    with inductor_config.patch({"fallback_random": True, "triton.cudagraphs": False}):
        with CompileRedirect(resolve_backend("inductor"), None):
            torch.compile(torch.nn.Linear(2, 2), mode="reduce-overhead")
            assert getattr(inductor_config.test_configs, KNOB) is True
        assert getattr(inductor_config.test_configs, KNOB) is False


def test_a_mode_torch_does_not_know_is_left_to_torch_compile_to_refuse() -> None:
    with inductor_config.patch({"triton.cudagraphs": False}):
        assert not asks_for_cuda_graphs({"mode": "no-such-mode"})
