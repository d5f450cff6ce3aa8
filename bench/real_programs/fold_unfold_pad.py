"""Patch operations: reflect and replicate padding, unfold into patches (im2col), a linear map per patch, fold
back with overlap-add, bicubic upsampling and an L1 loss; 3 steps of Adam."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class PatchNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.per_patch = nn.Linear(2 * 9, 2 * 9)
    def forward(self, x):
        h = F.pad(x, (1, 1, 1, 1), mode="reflect")
        patches = F.unfold(h, kernel_size=3)                      # (N, C*9, L)
        mixed = self.per_patch(patches.transpose(1, 2)).transpose(1, 2)
        out = F.fold(mixed, output_size=h.shape[-2:], kernel_size=3)
        out = F.pad(out[..., 1:-1, 1:-1], (2, 2, 2, 2), mode="replicate")
        return F.interpolate(out, scale_factor=2, mode="bicubic", align_corners=False)


model = PatchNet().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(2, 2, 8, 8, device=dev)
target = torch.randn(2, 2, 24, 24, device=dev)
for step in range(3):
    loss = F.l1_loss(compiled(x), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
