"""A two-tower recommender: EmbeddingBag (sum, per-sample weights, offsets) for the user's history, Embedding for
items, a dot-product interaction and an MLP, BCE-with-logits on clicks, Adagrad; 5 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class TwoTower(nn.Module):
    def __init__(self, users: int = 500, items: int = 300, dim: int = 16) -> None:
        super().__init__()
        self.history = nn.EmbeddingBag(items, dim, mode="sum")
        self.item = nn.Embedding(items, dim)
        self.user = nn.Embedding(users, dim)
        self.mlp = nn.Sequential(nn.Linear(3 * dim + 1, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, user, hist, offsets, weights, item):
        h = self.history(hist, offsets, per_sample_weights=weights)
        u, i = self.user(user), self.item(item)
        dot = (h + u).mul(i).sum(-1, keepdim=True)
        return self.mlp(torch.cat([h, u, i, dot], -1)).squeeze(-1)


model = TwoTower().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
for step in range(5):
    lengths = torch.randint(1, 6, (32,), device=dev)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), lengths.cumsum(0)[:-1]])
    hist = torch.randint(0, 300, (int(lengths.sum()),), device=dev)
    weights = torch.rand(hist.shape, device=dev)
    user, item = torch.randint(0, 500, (32,), device=dev), torch.randint(0, 300, (32,), device=dev)
    clicks = torch.randint(0, 2, (32,), device=dev).float()
    loss = F.binary_cross_entropy_with_logits(compiled(user, hist, offsets, weights, item), clicks)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
