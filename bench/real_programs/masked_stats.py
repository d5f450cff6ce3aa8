"""Masked statistics a model computes around padding: nanmean over NaN-marked positions, logsumexp over -inf
masks, nan_to_num, label-smoothed KL divergence with batchmean; a compiled encoder trained 3 steps with Adam."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Pooler(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.head = nn.Linear(32, 5)
    def forward(self, x, lengths):
        h = torch.tanh(self.proj(x))
        pad = torch.arange(x.shape[1], device=x.device)[None, :] >= lengths[:, None]
        mean = torch.nanmean(h.masked_fill(pad[..., None], float("nan")), dim=1)
        scores = h.sum(-1).masked_fill(pad, float("-inf"))
        attn = torch.exp(scores - torch.logsumexp(scores, dim=1, keepdim=True))
        pooled = torch.nan_to_num((attn[..., None] * h).sum(1), nan=0.0)
        return self.head(torch.cat([mean, pooled], dim=-1))


model = Pooler().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, lengths = torch.randn(6, 10, 16, device=dev), torch.tensor([10, 7, 3, 9, 1, 5], device=dev)
target = torch.full((6, 5), 0.1 / 4, device=dev).scatter_(1, torch.randint(0, 5, (6, 1), device=dev), 0.9)
for step in range(3):
    loss = F.kl_div(F.log_softmax(compiled(x, lengths), dim=-1), target, reduction="batchmean")
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
