"""A top-2 mixture of experts: router softmax, topk, per-expert gather by index, index_add_ back; 3 SGD steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
class MoE(nn.Module):
    def __init__(self, d=32, n=4):
        super().__init__()
        self.router = nn.Linear(d, n)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, d)) for _ in range(n))
    def forward(self, x):
        probs = F.softmax(self.router(x), dim=-1)
        w, idx = probs.topk(2, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(x[rows]) * w[rows, slot, None])
        return out
model = MoE()
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(64, 32)
for step in range(3):
    loss = compiled(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
