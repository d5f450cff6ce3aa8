"""Self-distillation with an EMA teacher (foreach lerp under no_grad), KL loss at temperature 2; 4 steps."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
student = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10)).to(dev)
teacher = copy.deepcopy(student).requires_grad_(False)
cs, ct = torch.compile(student), torch.compile(teacher)
opt = torch.optim.AdamW(student.parameters(), lr=1e-3)
for step in range(4):
    x = torch.randn(32, 16, device=dev)
    with torch.no_grad():
        soft = F.softmax(ct(x) / 2.0, -1)
    loss = F.kl_div(F.log_softmax(cs(x) / 2.0, -1), soft, reduction="batchmean") * 4.0
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        torch._foreach_lerp_(list(teacher.parameters()), list(student.parameters()), 0.1)
    print(f"step {step}: loss {loss.item():.6f}")
