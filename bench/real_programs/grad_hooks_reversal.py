"""Domain-adversarial training: a gradient reversal layer (a custom autograd Function), tensor hooks that scale
and clip gradients (register_hook), and a module full backward hook counting calls; SGD with momentum; 4 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Reverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return -ctx.scale * grad, None


class DANN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.label = nn.Linear(32, 5)
        self.domain = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.features(x)
        return self.label(f), self.domain(Reverse.apply(f, 0.3)).squeeze(-1)


model = DANN().to(dev)
calls = []
model.label.register_full_backward_hook(lambda module, gin, gout: calls.append(1))
for p in model.features.parameters():
    p.register_hook(lambda g: g.clamp(-0.5, 0.5) * 0.9)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(4):
    x = torch.randn(32, 20, device=dev)
    y, domain = torch.randint(0, 5, (32,), device=dev), (torch.arange(32, device=dev) % 2).float()
    logits, dom = compiled(x)
    loss = F.cross_entropy(logits, y) + F.binary_cross_entropy_with_logits(dom, domain)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f} backward hooks {len(calls)}")
