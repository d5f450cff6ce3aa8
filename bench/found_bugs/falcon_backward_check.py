"""Inductor on CPU gives wrong gradients for a small Hugging Face Falcon (parallel attention, multi-query,
rotary): found by tracediff on `hf_falcon_parallel.py` here (BENCHMARKS.md item 25). No tracediff involved:
one backward of the same model and batch in eager, float64 eager and compiled, each parameter's gradient's rms
error from float64, relative to its size. aot_eager's gradients equal eager's; inductor's (torch 2.13, CPU)
are up to 3% off in both layers' attention, while eager's error is 4e-7.

    python bench/found_bugs/falcon_backward_check.py [inductor|aot_eager]     # exit 1 when any is 1e-4 off
"""
import copy
import sys

import torch
from transformers import FalconConfig, FalconForCausalLM

backend = sys.argv[1] if len(sys.argv) > 1 else "inductor"
torch.manual_seed(0)
model = FalconForCausalLM(FalconConfig(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128, multi_query=True,
    parallel_attn=True, new_decoder_architecture=False, alibi=False, bias=False, hidden_dropout=0.0,
    attention_dropout=0.0, max_position_embeddings=64))
reference, compiled = copy.deepcopy(model).double(), copy.deepcopy(model)
data = torch.randint(0, 128, (2, 16))


def gradients(module: torch.nn.Module, call) -> dict[str, torch.Tensor]:
    call(input_ids=data, labels=data).loss.backward()
    return {name: p.grad.double() for name, p in module.named_parameters()}


def rms(x: torch.Tensor) -> float:
    return float(x.pow(2).mean().sqrt())


eager, exact = gradients(model, model), gradients(reference, reference)
ours = gradients(compiled, torch.compile(compiled, backend=backend))
worst = 0.0
for name, r in exact.items():
    error, eager_error = rms(ours[name] - r) / rms(r), rms(eager[name] - r) / rms(r)
    worst = max(worst, error)
    print(f"{name:55} {backend} {error:.2e}  eager {eager_error:.2e}")
print(f"largest relative error of {backend}'s gradients from float64: {worst:.2e}")
sys.exit(1 if worst > 1e-4 else 0)
