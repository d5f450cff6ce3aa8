"""An LSTM tagger over padded batches with pack_padded_sequence, compiled around the whole step."""
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(0)
class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16, padding_idx=0)
        self.lstm = nn.LSTM(16, 24, batch_first=True, bidirectional=True)
        self.out = nn.Linear(48, 5)
    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.emb(tokens), lengths, batch_first=True, enforce_sorted=False)
        h, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=tokens.shape[1])
        return self.out(h)
model = Tagger()
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
lengths = torch.tensor([7, 3, 5, 2])
tokens = torch.randint(1, 50, (4, 7))
for i, n in enumerate(lengths):
    tokens[i, n:] = 0
tags = torch.randint(0, 5, (4, 7))
tags[tokens == 0] = -100
for step in range(3):
    logits = compiled(tokens, lengths)
    loss = nn.functional.cross_entropy(logits.reshape(-1, 5), tags.reshape(-1), ignore_index=-100)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
