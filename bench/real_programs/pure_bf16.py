"""A model held in bfloat16 throughout (no autocast): parameters, activations and SGD updates in bf16, a float32
loss; 4 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 8)).to(dev, torch.bfloat16)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(16, 32, device=dev, dtype=torch.bfloat16), torch.randint(0, 8, (16,), device=dev)
for step in range(4):
    loss = F.cross_entropy(compiled(x).float(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
