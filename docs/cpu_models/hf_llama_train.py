"""HF Llama from a config: AdamW training steps with grad clipping, compiled."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)
model = LlamaForCausalLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
f = torch.compile(model)
ids = torch.randint(0, 128, (2, 16))
for _ in range(2):
    loss = f(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step(); opt.zero_grad()
    print("loss", loss.item())
