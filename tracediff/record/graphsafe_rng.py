"""Graph-safe RNG state for checkpointed random ops under CUDA graphs, where a recording has inductor call eager's
random ops (`fallback_random`).

Under `fallback_random`, AOTAutograd gives up graph-safe RNG functionalization for the random ops an activation
checkpoint recomputes: their saved state becomes a CPU seed and offset, which cudagraph trees copy as if they were
on the GPU, and the first CUDA graph recorded of the backward fails ("storage data ptrs are not allocated in pool";
H200, Hugging Face Llama with gradient checkpointing under TORCHINDUCTOR_CUDAGRAPHS=1, whose SDPA counts as a random
op; the plain script fails too as soon as `fallback_random` is set). Inductor's test knob
`graphsafe_rng_func_ignores_fallback_random` keeps the graph-safe state. It is set only for programs that ask for
CUDA graphs: the graph-safe state draws other numbers than eager's checkpoint does (an MLP with dropout under
checkpointing and `mode="reduce-overhead"`, compared by the traces alone, matched without it and differed with it).

Pinned torch internals (tests/test_torch_pins.py): torch._inductor.config.test_configs.
graphsafe_rng_func_ignores_fallback_random and its use by AOTAutograd's partitioner; torch._inductor.list_mode_options.
"""

from __future__ import annotations

from typing import Any

_KNOB = "graphsafe_rng_func_ignores_fallback_random"


def asks_for_cuda_graphs(compile_kwargs: dict[str, Any]) -> bool:
    """Will inductor run what `torch.compile(**compile_kwargs)` compiles as CUDA graphs (its `mode`, its `options`
    or the global config, e.g. TORCHINDUCTOR_CUDAGRAPHS=1)?"""
    import torch._inductor
    import torch._inductor.config as inductor_config

    mode = compile_kwargs.get("mode")
    try:
        options = dict(torch._inductor.list_mode_options(mode)) if mode else {}
    except (KeyError, RuntimeError):  # a mode torch does not know: torch.compile itself says so
        options = {}
    options.update(compile_kwargs.get("options") or {})
    return bool(options.get("triton.cudagraphs", inductor_config.triton.cudagraphs))


class GraphSafeRng:
    """Sets the knob for the rest of a run once a compile asks for CUDA graphs under `fallback_random`; `restore`
    puts it back."""

    def __init__(self) -> None:
        self._before: bool | None = None  # the knob's value before it was set; None: not set

    def before_compile(self, compile_kwargs: dict[str, Any]) -> None:
        if self._before is not None:
            return
        import torch._inductor.config as inductor_config

        tests = getattr(inductor_config, "test_configs", None)
        if not inductor_config.fallback_random or not hasattr(tests, _KNOB) or not asks_for_cuda_graphs(compile_kwargs):
            return
        self._before = bool(getattr(tests, _KNOB))
        setattr(tests, _KNOB, True)

    def restore(self) -> None:
        if self._before is None:
            return
        import torch._inductor.config as inductor_config

        setattr(inductor_config.test_configs, _KNOB, self._before)
        self._before = None
