"""LoRA adapters on a frozen MLP (requires_grad False base weights), weight-normed head, gradient accumulation."""
import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r=4, alpha=8):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(r, base.in_features) * 0.01)
        self.b = nn.Parameter(torch.zeros(base.out_features, r))
        self.scale = alpha / r
    def forward(self, x):
        return self.base(x) + (x @ self.a.t() @ self.b.t()) * self.scale


model = nn.Sequential(LoRALinear(nn.Linear(32, 64)), nn.ReLU(), LoRALinear(nn.Linear(64, 64)), nn.ReLU(),
                      weight_norm(nn.Linear(64, 3))).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-3)
for step in range(3):
    for _micro in range(2):
        x, y = torch.randn(8, 32, device=dev), torch.randint(0, 3, (8,), device=dev)
        (nn.functional.cross_entropy(compiled(x), y) / 2).backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step}: |b| {model[0].b.norm().item():.6f}")
