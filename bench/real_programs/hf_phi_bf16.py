"""Hugging Face Phi from a config: attention and MLP in parallel off one layer norm, rotary embeddings on half of
each head (partial_rotary_factor 0.5), GELU; trained 3 steps under bfloat16 autocast with AdamW, the model
compiled."""
import torch
from transformers import PhiConfig, PhiForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = PhiForCausalLM(PhiConfig(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
    max_position_embeddings=64, partial_rotary_factor=0.5, resid_pdrop=0.0, embd_pdrop=0.0,
    attention_dropout=0.0)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, 128, (2, 16), device=dev)
for step in range(3):
    with torch.autocast(dev, dtype=torch.bfloat16):
        loss = compiled(input_ids=data, labels=data).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
