"""A two-layer bidirectional LSTM tagger with dropout between layers (off: eval of dropout is not the point), a
CRF-free per-token cross entropy ignoring padding; Adam, 3 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 16, padding_idx=0)
        self.lstm = nn.LSTM(16, 24, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(48, 6)
    def forward(self, tokens):
        return self.out(self.lstm(self.emb(tokens))[0])


model = Tagger().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
tokens = torch.randint(1, 40, (3, 9), device=dev)
tokens[1, 6:] = 0
tags = torch.randint(0, 6, (3, 9), device=dev).masked_fill(tokens == 0, -100)
for step in range(3):
    loss = F.cross_entropy(compiled(tokens).reshape(-1, 6), tags.reshape(-1), ignore_index=-100)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
