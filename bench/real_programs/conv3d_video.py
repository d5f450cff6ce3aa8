"""A video classifier: Conv3d, BatchNorm3d, MaxPool3d, a temporal mean; SGD with momentum, 3 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(), nn.MaxPool3d(2),
                      nn.Conv3d(8, 16, 3, padding=1), nn.BatchNorm3d(16), nn.ReLU(),
                      nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(16, 4)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = torch.randn(2, 3, 6, 12, 12, device=dev), torch.randint(0, 4, (2,), device=dev)
for step in range(3):
    loss = F.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
