"""A small speech model: Conv1d front end, bidirectional GRU, log_softmax and CTC loss over padded targets."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Speech(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(13, 32, 5, padding=2), nn.GELU())
        self.rnn = nn.GRU(32, 32, batch_first=True, bidirectional=True)
        self.head = nn.Linear(64, 12)
    def forward(self, feats):
        h, _ = self.rnn(self.conv(feats).transpose(1, 2))
        return self.head(h).log_softmax(-1)


model = Speech().to(dev)
compiled = torch.compile(model)
ctc = nn.CTCLoss(blank=0, zero_infinity=True)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
feats = torch.randn(3, 13, 40, device=dev)
targets = torch.randint(1, 12, (3, 8), device=dev)
target_lengths = torch.tensor([8, 6, 5], device=dev)
input_lengths = torch.tensor([40, 35, 30], device=dev)
for step in range(3):
    logp = compiled(feats).transpose(0, 1)
    loss = ctc(logp, targets, input_lengths, target_lengths)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
