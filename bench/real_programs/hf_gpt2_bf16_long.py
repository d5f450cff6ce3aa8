"""Hugging Face GPT-2 from a config, trained 20 steps under bf16 autocast with AdamW, a warmup-cosine
learning-rate schedule and gradient clipping, on new random batches each step."""
import math

import torch
from transformers import GPT2Config, GPT2LMHeadModel

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
schedule = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: min(1.0, (s + 1) / 5) * 0.5 * (1 + math.cos(math.pi * min(s, 20) / 20)))
for step in range(20):
    batch = torch.randint(0, 128, (4, 16), device=dev)
    with torch.autocast(dev, dtype=torch.bfloat16):
        loss = compiled(input_ids=batch, labels=batch).loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    schedule.step()
    print(f"step {step}: loss {loss.item():.4f}")
