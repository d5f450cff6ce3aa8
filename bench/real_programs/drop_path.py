"""Stochastic depth (per-sample drop path) and SDPA with a boolean mask and attention dropout; 3 training steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d=32, p=0.2):
        super().__init__()
        self.qkv, self.out, self.norm, self.p = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.LayerNorm(d), p
    def forward(self, x, mask):
        q, k, v = self.qkv(self.norm(x)).chunk(3, -1)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1 if self.training else 0.0)
        keep = (torch.rand(x.shape[0], 1, 1, device=x.device) > self.p).to(x.dtype) / (1 - self.p)
        return x + self.out(a) * keep


model = nn.ModuleList(Block() for _ in range(3)).to(dev)
def forward(x, mask):
    for block in model:
        x = block(x, mask)
    return x.mean()
compiled = torch.compile(forward)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
mask = torch.ones(10, 10, dtype=torch.bool, device=dev).tril()
for step in range(3):
    loss = compiled(torch.randn(4, 10, 32, device=dev), mask)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
