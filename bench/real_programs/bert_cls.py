"""BERT sequence classification fine-tuning, attention mask with padding, eval at the end under no_grad."""
import torch
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(0)
model = BertForSequenceClassification(BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                 num_attention_heads=2, vocab_size=200, max_position_embeddings=64,
                                                 num_labels=3))
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
ids = torch.randint(1, 200, (4, 24))
mask = torch.ones_like(ids)
mask[1, 18:] = 0
mask[3, 10:] = 0
labels = torch.tensor([0, 2, 1, 0])
for step in range(3):
    out = compiled(input_ids=ids, attention_mask=mask, labels=labels)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    print(f"step {step}: loss {out.loss.item():.5f}")
model.eval()
with torch.no_grad():
    print("pred", compiled(input_ids=ids, attention_mask=mask).logits.argmax(-1).tolist())
