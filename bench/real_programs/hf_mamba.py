"""Hugging Face Mamba from a config on its pure-PyTorch path (no CUDA kernels): a depthwise causal conv1d, the
selective scan as a Python loop over time steps (softplus, exp, einsum, cumulative state), RMSNorm; compiled,
AdamW; 2 steps."""
import torch
from transformers import MambaConfig, MambaForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = MambaForCausalLM(MambaConfig(hidden_size=32, state_size=8, num_hidden_layers=2, vocab_size=64,
                                     expand=2, conv_kernel=4, use_mambapy=False)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, 64, (2, 12), device=dev)
for step in range(2):
    loss = compiled(input_ids=data, labels=data).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
