"""Hugging Face RoBERTa from a config for sequence classification, a padded batch with its attention mask (SDPA
with a mask), AdamW with weight decay, the whole model compiled; 3 steps."""
import torch
from transformers import RobertaConfig, RobertaForSequenceClassification

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = RobertaForSequenceClassification(RobertaConfig(
    vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=40, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
ids = torch.randint(3, 100, (3, 12), device=dev)
mask = torch.ones_like(ids)
ids[1, 8:], mask[1, 8:] = 1, 0  # RoBERTa's pad id
labels = torch.tensor([0, 2, 1], device=dev)
for step in range(3):
    loss = compiled(input_ids=ids, attention_mask=mask, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
