"""Geometry features: pairwise distances (cdist), einsum attention, a QR-orthogonalized projection and a
Cholesky solve on a well-conditioned Gram matrix; a compiled model trained 3 steps with SGD."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Geo(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) * 0.3)
        self.head = nn.Linear(8, 1)
    def forward(self, pts):
        q, _ = torch.linalg.qr(self.w)
        x = pts @ q
        d = torch.cdist(x, x)
        attn = torch.softmax(-d, dim=-1)
        h = torch.einsum("bij,bjd->bid", attn, x)
        gram = h.transpose(1, 2) @ h / h.shape[1] + torch.eye(8, device=h.device)
        sol = torch.cholesky_solve(h.mean(1, keepdim=True).transpose(1, 2), torch.linalg.cholesky(gram))
        return self.head(sol.squeeze(-1))


model = Geo().to(dev)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
pts, y = torch.randn(4, 10, 8, device=dev), torch.randn(4, 1, device=dev)
for step in range(3):
    loss = ((compiled(pts) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
