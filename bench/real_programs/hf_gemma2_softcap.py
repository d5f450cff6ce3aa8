"""Hugging Face Gemma-2 from a config: attention-logit and final-logit soft-capping (tanh), alternating sliding and
global attention layers, pre- and post-norms, GELU-tanh gated MLP; the model compiled, AdamW; 3 steps."""
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = Gemma2ForCausalLM(Gemma2Config(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, vocab_size=128, max_position_embeddings=64, sliding_window=8, attn_logit_softcapping=50.0,
    final_logit_softcapping=30.0, attn_implementation="eager")).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, 128, (2, 16), device=dev)
for step in range(3):
    loss = compiled(input_ids=data, labels=data).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
