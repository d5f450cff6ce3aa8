"""The compiled optimizer step of PyTorch's tutorial: Adam's step under torch.compile, the LR a tensor, 4 steps."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(4)]).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01), weight_decay=1e-4)
sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=4)


@torch.compile(fullgraph=False)
def opt_step():
    opt.step()


x = torch.randn(16, 32, device=dev)
for step in range(4):
    loss = model(x).square().mean()
    loss.backward()
    opt_step()
    sched.step()
    opt.zero_grad()
    print(f"step {step}: loss {loss.item():.6f}")
