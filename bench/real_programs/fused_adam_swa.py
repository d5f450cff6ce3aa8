"""Fused AdamW (one kernel for every parameter), a OneCycle learning rate, and stochastic weight averaging
(torch.optim.swa_utils.AveragedModel) updated every step from step 2; the model compiled, the averaged model
evaluated at the end; 6 steps."""
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(),
                      nn.Linear(32, 1)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-2, total_steps=6)
swa = AveragedModel(model)
x, y = torch.randn(64, 10, device=dev), torch.randn(64, 1, device=dev)
for step in range(6):
    loss = nn.functional.mse_loss(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if step >= 2:
        swa.update_parameters(model)
    print(f"step {step}: loss {loss.item():.5f}")
swa.eval()
with torch.no_grad():
    print(f"swa loss {nn.functional.mse_loss(swa(x), y).item():.5f}")
