"""A spatial transformer: a localization net predicts an affine grid, grid_sample warps the image, bilinear
interpolate upsamples; 3 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class STN(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 4, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.LazyLinear(6))
        self.cls = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.AdaptiveMaxPool2d(4), nn.Flatten(), nn.Linear(64, 10))
    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3) * 0.1 + torch.tensor([[1.0, 0, 0], [0, 1.0, 0]], device=x.device)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        warped = F.grid_sample(x, grid, align_corners=False)
        return self.cls(F.interpolate(warped, scale_factor=1.5, mode="bilinear", align_corners=False))


model = STN().to(dev)
model(torch.randn(1, 1, 20, 20, device=dev))  # materialize the lazy layer
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(6, 1, 20, 20, device=dev), torch.randint(0, 10, (6,), device=dev)
for step in range(3):
    loss = F.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
