"""Hugging Face Llama from a config with gradient checkpointing on, AdamW with a linear warmup schedule, the whole
model compiled; 4 steps."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)).to(dev)
model.gradient_checkpointing_enable()
model.train()
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 3))
data = torch.randint(0, 128, (2, 16), device=dev)
for step in range(4):
    loss = compiled(input_ids=data, labels=data).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    print(f"step {step}: loss {loss.item():.5f}")
