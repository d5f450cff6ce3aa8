"""A small UNet-like denoiser: conv, GroupNorm, SiLU, a timestep embedding, nearest upsample, skip concat; AdamW."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
class Block(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.n1 = nn.GroupNorm(4, cout)
        self.t = nn.Linear(16, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.n2 = nn.GroupNorm(4, cout)
    def forward(self, x, temb):
        h = F.silu(self.n1(self.c1(x))) + self.t(temb)[:, :, None, None]
        return F.silu(self.n2(self.c2(h)))
class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = Block(3, 16)
        self.mid = Block(16, 32)
        self.up = Block(48, 16)
        self.out = nn.Conv2d(16, 3, 1)
    def forward(self, x, t):
        half = torch.exp(-torch.arange(8) * (torch.log(torch.tensor(1000.0)) / 8))
        temb = torch.cat([torch.sin(t[:, None] * half), torch.cos(t[:, None] * half)], dim=-1)
        d = self.down(x, temb)
        m = self.mid(F.avg_pool2d(d, 2), temb)
        return self.out(self.up(torch.cat([F.interpolate(m, scale_factor=2, mode="nearest"), d], 1), temb))
model = UNet()
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x0 = torch.randn(4, 3, 16, 16)
for step in range(3):
    t = torch.randint(0, 1000, (4,)).float()
    noise = torch.randn_like(x0)
    a = (1 - t / 1000)[:, None, None, None]
    loss = F.mse_loss(compiled(a.sqrt() * x0 + (1 - a).sqrt() * noise, t), noise)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
