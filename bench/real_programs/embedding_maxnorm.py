"""An Embedding with max_norm, which renormalizes the rows it looks up in place during the forward (a parameter
mutated inside compiled code), and an orthogonal parametrization recomputing a weight each forward; 4 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import orthogonal

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16, max_norm=1.0)
        self.rot = orthogonal(nn.Linear(16, 16, bias=False))
        self.head = nn.Linear(16, 4)
    def forward(self, idx):
        return self.head(torch.relu(self.rot(self.emb(idx))).mean(1))


model = Model().to(dev)
with torch.no_grad():
    model.emb.weight.mul_(3.0)  # rows beyond max_norm: the lookups renormalize them
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
idx, y = torch.randint(0, 50, (8, 6), device=dev), torch.randint(0, 4, (8,), device=dev)
for step in range(4):
    loss = F.cross_entropy(compiled(idx), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f} |emb| {model.emb.weight.norm().item():.5f}")
