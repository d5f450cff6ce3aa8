"""float16 autocast with a GradScaler (on the CPU where there is no GPU), unscale and clip before the step; 4 steps."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 8)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler(dev, init_scale=2.0 ** 10)
for step in range(4):
    x, y = torch.randn(16, 32, device=dev), torch.randint(0, 8, (16,), device=dev)
    with torch.autocast(dev, dtype=torch.float16):
        loss = nn.functional.cross_entropy(compiled(x), y)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    print(f"step {step}: loss {loss.float().item():.5f} scale {scaler.get_scale():.0f}")
