"""Data-dependent control flow: torch.cond, a .item() branch (a graph break) and a while loop on a tensor norm."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)
    def forward(self, x):
        x = torch.cond(x.sum() > 0, lambda t: self.a(t).relu(), lambda t: self.b(t).tanh(), (x,))
        if x.abs().mean().item() > 0.3:  # graph break on .item()
            x = x * 0.5
        steps = 0
        while x.norm() > 1.0 and steps < 5:
            x = x * 0.7 + 0.01
            steps += 1
        return x


model = Net().to(dev)
compiled = torch.compile(model)
for i in range(3):
    x = torch.randn(4, 16, device=dev) * (i + 1) - 0.5 * i
    print(i, compiled(x).sum().item())
