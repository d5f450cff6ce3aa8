"""torch.utils.checkpoint.checkpoint_sequential (non-reentrant) over a deep MLP inside a compiled forward; 3 steps."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint_sequential

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
layers = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(8)]).to(dev)


@torch.compile
def forward(x):
    return checkpoint_sequential(layers, 4, x, use_reentrant=False).sum(-1)


opt = torch.optim.SGD(layers.parameters(), lr=0.1)
x, y = torch.randn(16, 32, device=dev), torch.randn(16, device=dev)
for step in range(3):
    loss = (forward(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
