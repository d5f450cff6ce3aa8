"""Activation checkpointing the old way, `use_reentrant=True`, around each residual block of a compiled MLP
(dynamo runs the checkpointed function eagerly in its own autograd Function); gradient accumulation over two
micro-batches, SGD with momentum and weight decay; 3 steps."""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, dim: int = 32, depth: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=True)
        return self.head(x)


model = Net().to(dev)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
x = torch.randn(16, 32, device=dev, requires_grad=True)  # reentrant checkpointing needs an input that requires grad
y = torch.randint(0, 4, (16,), device=dev)
for step in range(3):
    opt.zero_grad()
    for half in (slice(0, 8), slice(8, 16)):
        loss = nn.functional.cross_entropy(compiled(x[half]), y[half]) / 2
        loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
