"""Per-sample gradients with torch.func (functional_call, vmap, grad) compiled; their norms clip a DP-SGD step."""
import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2))
params = {k: v.detach() for k, v in model.named_parameters()}
def loss_one(p, x, y):
    return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])
per_sample = torch.compile(vmap(grad(loss_one), in_dims=(None, 0, 0)))
x, y = torch.randn(8, 10), torch.randint(0, 2, (8,))
for step in range(3):
    g = per_sample(params, x, y)
    norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
    scale = (1.0 / norms).clamp(max=1.0)
    params = {k: params[k] - 0.1 * (g[k] * scale.view(-1, *[1] * (g[k].dim() - 1))).mean(0) for k in params}
    print(f"step {step}: mean norm {norms.mean().item():.6f}")
