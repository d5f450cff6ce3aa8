"""Quantization-aware training: per-tensor fake quantization of activations and per-channel of weights, with
straight-through gradients; 3 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class QATLinear(nn.Linear):
    def forward(self, x):
        scale = self.weight.detach().abs().amax(1).clamp_min(1e-8) / 127
        w = torch.fake_quantize_per_channel_affine(self.weight, scale, torch.zeros_like(scale, dtype=torch.int32),
                                                   0, -128, 127)
        x = torch.fake_quantize_per_tensor_affine(x, 0.05, 0, -128, 127)
        return F.linear(x, w, self.bias)


model = nn.Sequential(QATLinear(16, 32), nn.ReLU(), QATLinear(32, 4)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(32, 16, device=dev), torch.randint(0, 4, (32,), device=dev)
for step in range(3):
    loss = F.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
