"""Ranking ops: a soft top-k router (topk, sort, gather, scatter), median pooling and a quantile threshold."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Ranker(nn.Module):
    def __init__(self):
        super().__init__()
        self.score = nn.Linear(8, 1)
        self.proj = nn.Linear(8, 8)
    def forward(self, x):
        s = self.score(x).squeeze(-1)
        top, idx = s.topk(4, dim=1)
        picked = x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1])) * top.sigmoid()[..., None]
        order = s.sort(dim=1, descending=True).indices
        ranks = torch.empty_like(order).scatter_(1, order, torch.arange(s.shape[1], device=x.device).expand_as(order))
        thresh = torch.quantile(s, 0.75, dim=1, keepdim=True)
        return self.proj(picked).median(dim=1).values.sum() + (ranks.float() * (s > thresh)).mean() * 1e-3


model = Ranker().to(dev)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = compiled(torch.randn(5, 12, 8, device=dev))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
