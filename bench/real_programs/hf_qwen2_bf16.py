"""Qwen2 from a config trained 8 steps with AdamW under bf16 autocast, fused cross entropy on labels."""
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = Qwen2ForCausalLM(Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=256, max_position_embeddings=64)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
data = torch.randint(0, 256, (2, 24), device=dev)
for step in range(8):
    with torch.autocast(dev, dtype=torch.bfloat16):
        loss = compiled(input_ids=data, labels=data).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.float().item():.5f}")
