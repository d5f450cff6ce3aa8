"""Hugging Face BLOOM from a config: ALiBi position biases added through baddbmm, fused query-key-value, the
embedding LayerNorm, GELU; the model compiled, AdamW with a cosine schedule; 3 steps."""
import torch
from transformers import BloomConfig, BloomForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = BloomForCausalLM(BloomConfig(hidden_size=64, n_layer=2, n_head=4, vocab_size=128,
                                     hidden_dropout=0.0, attention_dropout=0.0)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)
data = torch.randint(0, 128, (2, 16), device=dev)
mask = torch.ones_like(data)
mask[1, -4:] = 0
for step in range(3):
    loss = compiled(input_ids=data, attention_mask=mask, labels=data).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    print(f"step {step}: loss {loss.item():.5f}")
