"""HF BERT from a config: sequence classification forward+backward, compiled."""
import torch
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(0)
cfg = BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 vocab_size=128, max_position_embeddings=64, num_labels=3)
model = BertForSequenceClassification(cfg)
f = torch.compile(model)
ids = torch.randint(0, 128, (2, 16))
labels = torch.tensor([0, 2])
out = f(input_ids=ids, labels=labels)
out.loss.backward()
print("loss", out.loss.item())
