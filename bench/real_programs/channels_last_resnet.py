"""A small ResNet in channels_last memory format with BatchNorm, SGD with Nesterov momentum and weight decay, a
OneCycleLR schedule and gradient clipping; 4 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), Block(16), nn.AvgPool2d(2), Block(16),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).to(dev, memory_format=torch.channels_last)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=4)
x = torch.randn(8, 3, 16, 16, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 10, (8,), device=dev)
for step in range(4):
    loss = F.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    print(f"step {step}: loss {loss.item():.5f} grad norm {norm.item():.5f}")
