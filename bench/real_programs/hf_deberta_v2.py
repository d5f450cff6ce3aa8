"""Hugging Face DeBERTa-v2 from a config (disentangled attention: content-to-position and position-to-content
terms gathered from relative-position embeddings), sequence classification, AdamW; 3 steps."""
import torch
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = DebertaV2ForSequenceClassification(DebertaV2Config(
    vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=32, relative_attention=True, position_buckets=8, pos_att_type=["c2p", "p2c"],
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(3, 100, (3, 12), device=dev)
mask = torch.ones_like(ids)
mask[2, 9:] = 0
labels = torch.tensor([0, 1, 2], device=dev)
for step in range(3):
    loss = compiled(input_ids=ids, attention_mask=mask, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
