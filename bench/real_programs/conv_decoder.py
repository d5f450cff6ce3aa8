"""An image decoder: ConvTranspose2d, PixelShuffle, nearest upsampling, BCE-with-logits against a target; 3 steps."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Unflatten(1, (16, 2, 2)), nn.ConvTranspose2d(16, 16, 4, stride=2, padding=1), nn.SiLU(),
                      nn.Conv2d(16, 32, 3, padding=1), nn.PixelShuffle(2), nn.Upsample(scale_factor=2),
                      nn.Conv2d(8, 1, 3, padding=1)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
z, target = torch.randn(4, 64, device=dev), (torch.rand(4, 1, 16, 16, device=dev) > 0.5).float()
for step in range(3):
    loss = nn.functional.binary_cross_entropy_with_logits(compiled(z), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
