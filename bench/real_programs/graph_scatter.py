"""Message passing on a random graph: messages gathered by edge, summed with index_add, max-pooled and averaged
with scatter_reduce (duplicate indices), degree histogram with bincount, bucketized edge weights; 3 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
nodes, edges = 20, 60
src, dst = torch.randint(0, nodes, (edges,), device=dev), torch.randint(0, nodes, (edges,), device=dev)
weight = torch.rand(edges, device=dev)


class GNN(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.msg, self.upd, self.edge_emb = nn.Linear(d, d), nn.Linear(3 * d, d), nn.Embedding(4, d)
    def forward(self, x):
        bins = torch.bucketize(weight, torch.tensor([0.25, 0.5, 0.75], device=x.device))
        m = torch.relu(self.msg(x[src]) + self.edge_emb(bins))
        summed = torch.zeros_like(x).index_add_(0, dst, m)
        biggest = torch.zeros_like(x).scatter_reduce(0, dst[:, None].expand_as(m), m, "amax", include_self=False)
        mean = torch.zeros_like(x).scatter_reduce(0, dst[:, None].expand_as(m), m, "mean", include_self=False)
        degree = torch.bincount(dst, minlength=nodes).to(x.dtype)[:, None]
        return x + torch.tanh(self.upd(torch.cat([summed / degree.clamp(min=1), biggest, mean], dim=-1)))


model = GNN().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, target = torch.randn(nodes, 16, device=dev), torch.randn(nodes, 16, device=dev)
for step in range(3):
    loss = F.mse_loss(compiled(x), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
