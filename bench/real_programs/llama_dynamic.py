"""Llama, gradient checkpointing, varying sequence lengths (dynamic shapes), bf16 autocast, warmup schedule."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM, get_linear_schedule_with_warmup

torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=200, max_position_embeddings=128))
model.gradient_checkpointing_enable()
model.train()
compiled = torch.compile(model, dynamic=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
sched = get_linear_schedule_with_warmup(opt, 2, 6)
for step, seq in enumerate([16, 24, 32, 20, 28, 16]):
    data = torch.randint(0, 200, (2, seq))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = compiled(input_ids=data, labels=data).loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    print(f"step {step} seq {seq}: loss {loss.float().item():.5f}")
