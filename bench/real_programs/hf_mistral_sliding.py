"""Hugging Face Mistral from a config: grouped-query attention with a sliding window shorter than the sequence,
RMSNorm, SwiGLU; AdamW with gradient clipping, the model compiled; 3 steps."""
import torch
from transformers import MistralConfig, MistralForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = MistralForCausalLM(MistralConfig(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=128, max_position_embeddings=64, sliding_window=8, attn_implementation="sdpa")).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, 128, (2, 20), device=dev)
for step in range(3):
    loss = compiled(input_ids=data, labels=data).loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
