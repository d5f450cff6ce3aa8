"""HF BERT from a config: masked LM eval loop, compiled."""
import torch
from transformers import BertConfig, BertForMaskedLM

torch.manual_seed(0)
cfg = BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 vocab_size=128, max_position_embeddings=64)
model = BertForMaskedLM(cfg).eval()
f = torch.compile(model)
total = 0.0
with torch.no_grad():
    for _ in range(2):
        ids = torch.randint(0, 128, (2, 16))
        total += f(input_ids=ids).logits.softmax(-1).max(-1).values.mean().item()
print("score", total)
