"""Compiled autograd: the backward pass captured and compiled by dynamo as a graph of its own
(`torch._dynamo.config.compiled_autograd`), a residual MLP with dropout off and weight decay, SGD with momentum;
4 steps."""
import torch
import torch._dynamo
from torch import nn

torch._dynamo.config.compiled_autograd = True
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(12, 32)
        self.hidden = nn.ModuleList(nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 32), nn.SiLU()) for _ in range(3))
        self.out = nn.Linear(32, 3)

    def forward(self, x):
        x = self.inp(x)
        for layer in self.hidden:
            x = x + layer(x)
        return self.out(x)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
x, y = torch.randn(16, 12), torch.randint(0, 3, (16,))


@torch.compile
def train_step(x, y):
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss


for step in range(4):
    opt.zero_grad()
    loss = train_step(x, y)
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
