"""HF GPT-2 from a config: 2 AdamW steps, compiled."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
model = GPT2LMHeadModel(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = torch.compile(model)
ids = torch.randint(0, 128, (2, 32))
for i in range(2):
    out = step(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step(); opt.zero_grad()
    print("loss", out.loss.item())
