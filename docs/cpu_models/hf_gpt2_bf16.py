"""HF GPT-2 from a config under bf16 autocast, forward, compiled."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
model = GPT2LMHeadModel(cfg).eval()
f = torch.compile(model)
ids = torch.randint(0, 128, (2, 32))
with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    logits = f(input_ids=ids).logits
print("logits", logits.float().sum().item())
