"""Advice for a determinism check: two runs of the same configuration that differ.

When both runs used the same backend, a divergence is not a compiler bug but
nondeterminism, and what a user can do about it depends on what the first
differing op is:

- an op returning uninitialized memory (`torch.empty` ...) that is read before
  it is written: the program computes with garbage;
- a random op (torch tags it `nondeterministic_seeded`): the seed tracediff
  sets does not cover the generator the script uses;
- an op on torch's list of nondeterministic algorithms (atomics on CUDA):
  `torch.use_deterministic_algorithms(True)`;
- an input that differs before any op ran: data loading or initialization
  outside the seeded generators.

Pure: an outcome in, the outcome with its `determinism` section out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tracediff.diff.place import draws_random
from tracediff.op_names import UNINITIALIZED_OUTPUT_OPS, base_op, packet
from tracediff.outcome import Cause, Divergence, Outcome, Site

# Base names of aten ops that torch documents as nondeterministic on CUDA
# (`torch.use_deterministic_algorithms` docstring, torch 2.13): atomics in
# scatter/index accumulation and in the backward of pooling, padding,
# interpolation and loss kernels, plus cuBLAS/cuDNN algorithm choices.
NONDETERMINISTIC_ON_CUDA = frozenset({
    "aten::index_add", "aten::index_put", "aten::_index_put_impl", "aten::put", "aten::scatter",
    "aten::scatter_add", "aten::scatter_reduce", "aten::index_copy", "aten::gather", "aten::index_select",
    "aten::repeat_interleave", "aten::cumsum", "aten::histc", "aten::bincount", "aten::median",
    "aten::embedding_bag", "aten::_embedding_bag", "aten::_embedding_bag_backward", "aten::embedding_dense_backward",
    "aten::nll_loss", "aten::nll_loss2d", "aten::nll_loss_backward", "aten::nll_loss2d_backward",
    "aten::ctc_loss", "aten::_ctc_loss_backward", "aten::grid_sampler_2d_backward", "aten::grid_sampler_3d_backward",
    "aten::max_unpool2d", "aten::max_unpool3d", "aten::max_pool3d_with_indices_backward",
    "aten::avg_pool3d_backward", "aten::adaptive_avg_pool2d_backward", "aten::_adaptive_avg_pool2d_backward",
    "aten::adaptive_avg_pool3d_backward", "aten::_adaptive_avg_pool3d_backward",
    "aten::adaptive_max_pool2d_backward", "aten::fractional_max_pool2d_backward",
    "aten::fractional_max_pool3d_backward", "aten::reflection_pad1d_backward", "aten::reflection_pad2d_backward",
    "aten::reflection_pad3d_backward", "aten::replication_pad1d_backward", "aten::replication_pad2d_backward",
    "aten::replication_pad3d_backward", "aten::upsample_linear1d_backward", "aten::upsample_bilinear2d_backward",
    "aten::upsample_bicubic2d_backward", "aten::upsample_trilinear3d_backward",
    "aten::convolution", "aten::convolution_backward", "aten::cudnn_convolution", "aten::mm", "aten::addmm",
    "aten::bmm", "aten::baddbmm", "aten::matmul",
})

DETERMINISTIC_ALGORITHMS = ("call torch.use_deterministic_algorithms(True) at the start of the script "
                            "and set CUBLAS_WORKSPACE_CONFIG=:4096:8 in the environment (CUDA); it raises "
                            "at any op that has no deterministic implementation")


def _is_uninitialized_op(op: str) -> bool:
    return packet(op) in UNINITIALIZED_OUTPUT_OPS


def _where(place: Site) -> str:
    return f"{place.source or 'an unknown line'}" + (f" [{place.module}]" if place.module else "")


def determinism_advice(first: Divergence | None, backend: str, seed: int | None) -> dict[str, Any]:
    """Why two runs of `backend` may differ at `first`, and what to do; `cause` names the case."""
    if first is None:
        return {"backend": backend, "cause": None, "advice": []}
    named = first.site
    places = [named, *first.candidates]
    if first.cause is Cause.UNINITIALIZED_MEMORY:
        uninit = next((p for p in places if p.op and _is_uninitialized_op(p.op)), named)
        return {"backend": backend, "cause": "uninitialized_memory", "advice": [
            f"the program reads uninitialized memory from {uninit.op} (torch.empty and friends) at "
            f"{_where(uninit)}: its contents are whatever the allocator left there, different in every run",
            "use torch.zeros / torch.full (or write every element before reading it); to find such reads, "
            "torch.use_deterministic_algorithms(True) fills new memory with NaN (floats) or the largest value "
            "(integers), so every run agrees and the garbage shows",
        ]}
    random = next((p for p in places if p.op and draws_random(p.op)), None)
    if random is not None:
        return {"backend": backend, "cause": "random", "advice": [
            f"{random.op} at {_where(random)} draws different random numbers in the two runs although "
            f"tracediff seeded torch, random and numpy with {seed}",
            "the script reseeds or uses a generator of its own (torch.Generator, numpy.random.default_rng, "
            "seeds from time or os.urandom, DataLoader workers): seed it from a fixed value",
        ]}
    if named.op and base_op(named.op) in NONDETERMINISTIC_ON_CUDA:
        return {"backend": backend, "cause": "nondeterministic_algorithm", "advice": [
            f"{named.op} at {_where(named)} is on torch's list of ops that are nondeterministic on CUDA "
            "(atomic adds, algorithm choice)",
            DETERMINISTIC_ALGORITHMS,
        ]}
    if first.cause is Cause.PROGRAM_INPUT:
        return {"backend": backend, "cause": "input", "advice": [
            f"an input of {named.op} at {_where(named)} already differs before any recorded op changed it: "
            "a program input, parameter or buffer is made differently in the two runs",
            "look for data or initialization outside torch's seeded generator (file order, time, os.urandom, "
            "hash(), a torch.Generator of the script's own)",
        ]}
    return {"backend": backend, "cause": "nondeterministic_kernel", "advice": [
        f"{named.op} at {_where(named)} gives different outputs for identical inputs",
        "likely a nondeterministic kernel (atomics on CUDA, thread-count dependent reductions, autotuning); "
        + DETERMINISTIC_ALGORITHMS,
        "if the header differences show another num_threads or setting, fix it with torch.set_num_threads",
    ]}


def with_advice(outcome: Outcome, backend: str, seed: int | None) -> Outcome:
    """`outcome` of two runs of the same backend, with its `determinism` section."""
    return replace(outcome, determinism=determinism_advice(outcome.first_divergence, backend, seed))
