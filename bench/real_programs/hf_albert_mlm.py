"""Hugging Face ALBERT from a config (one layer's weights shared by every layer, factorized embeddings), masked
language modelling on a padded batch, AdamW; 3 steps."""
import torch
from transformers import AlbertConfig, AlbertForMaskedLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = AlbertForMaskedLM(AlbertConfig(
    vocab_size=120, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
    intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(5, 120, (2, 14), device=dev)
mask = torch.ones_like(ids)
mask[1, 10:] = 0
labels = torch.full_like(ids, -100)
labels[:, 3] = ids[:, 3]
labels[:, 7] = ids[:, 7]
ids[:, 3], ids[:, 7] = 4, 4  # the [MASK] id
for step in range(3):
    loss = compiled(input_ids=ids, attention_mask=mask, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
