"""A CNN of the other normalizations: GroupNorm, InstanceNorm2d with affine weights, a LayerNorm over channels in
channels_last, depthwise separable convolutions and SiLU; AdamW, 3 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class ChannelLayerNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU())
        self.depthwise = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.InstanceNorm2d(16, affine=True),
                                       nn.Conv2d(16, 32, 1), ChannelLayerNorm(32), nn.SiLU())
        self.head = nn.Linear(32, 5)
    def forward(self, x):
        return self.head(self.depthwise(self.stem(x)).mean((2, 3)))


model = Net().to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
x, y = torch.randn(4, 3, 16, 16, device=dev), torch.randint(0, 5, (4,), device=dev)
for step in range(3):
    loss = F.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
