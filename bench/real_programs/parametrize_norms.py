"""Parametrizations recomputed at each access: an orthogonal recurrent weight (torch.nn.utils.parametrizations
.orthogonal, a matrix exponential / Cayley map), weight normalization and spectral norm on linear layers; the
model compiled, Adam; 4 steps."""
import torch
from torch import nn
from torch.nn.utils import parametrizations as P

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = P.weight_norm(nn.Linear(12, 24))
        self.rec = P.orthogonal(nn.Linear(24, 24, bias=False))
        self.out = P.spectral_norm(nn.Linear(24, 5))

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        for _ in range(3):
            h = torch.tanh(self.rec(h) + h)
        return self.out(h)


model = Net().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(16, 12, device=dev), torch.randint(0, 5, (16,), device=dev)
for step in range(4):
    loss = nn.functional.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
