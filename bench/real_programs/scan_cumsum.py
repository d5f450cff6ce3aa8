"""A linear-recurrence sequence layer written with cumsum and logcumsumexp (a parallel scan), 256 steps long;
3 training steps."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Scan(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.decay = nn.Linear(d, d)
        self.inp = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
    def forward(self, x):
        log_a = -nn.functional.softplus(self.decay(x))            # log of a decay in (0, 1)
        cum = log_a.cumsum(1)
        h = torch.exp(cum) * torch.logcumsumexp(self.inp(x) - cum, 1).exp()
        return self.out(h)


model = Scan().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(2, 256, 16, device=dev)
for step in range(3):
    loss = compiled(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
