"""HF Llama from a config: forward, compiled, no grad."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)
model = LlamaForCausalLM(cfg).eval()
f = torch.compile(model)
ids = torch.randint(0, 128, (2, 16))
with torch.no_grad():
    out = f(input_ids=ids).logits
print("logits", out.sum().item())
