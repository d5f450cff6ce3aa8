"""Hugging Face Falcon from a config: parallel attention and MLP, multi-query attention (one key/value head),
rotary embeddings, no biases; SGD with Nesterov momentum, the model compiled; 3 steps. Written as a healthy
program, it is not one under inductor on CPU (torch 2.13): its gradients come out up to 3% wrong
(falcon_backward_check.py here, BENCHMARKS.md item 25), so `tracediff run` is right to call it DIVERGED there."""
import torch
from transformers import FalconConfig, FalconForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = FalconForCausalLM(FalconConfig(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128, multi_query=True,
    parallel_attn=True, new_decoder_architecture=False, alibi=False, bias=False, hidden_dropout=0.0,
    attention_dropout=0.0, max_position_embeddings=64)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
data = torch.randint(0, 128, (2, 16), device=dev)
for step in range(3):
    loss = compiled(input_ids=data, labels=data).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
