"""First-order MAML: an inner SGD step on functional weights (torch.func.functional_call over the compiled
module, the adapted weights non-leaf tensors), the outer loss differentiated through the adapted weights to the
originals; 3 meta-steps of 2 tasks. (Second order, create_graph=True, is not supported by torch.compile.)"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1, 40), nn.Tanh(), nn.Linear(40, 40), nn.Tanh(), nn.Linear(40, 1)).to(dev)
compiled = torch.compile(model)
meta_opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def task(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    amp, phase = torch.rand(2, device=dev) * torch.tensor([4.5, 3.0], device=dev) + torch.tensor([0.5, 0.0], device=dev)
    x = torch.rand(n, 1, device=dev) * 10 - 5
    return x, amp * torch.sin(x + phase)


for step in range(3):
    meta_opt.zero_grad()
    total = 0.0
    for _ in range(2):
        xs, ys = task(10)
        xq, yq = task(10)
        params = dict(model.named_parameters())
        inner = F.mse_loss(functional_call(compiled, params, (xs,)), ys)
        grads = torch.autograd.grad(inner, list(params.values()), create_graph=False)
        adapted = {name: p - 0.01 * g for (name, p), g in zip(params.items(), grads)}
        outer = F.mse_loss(functional_call(compiled, adapted, (xq,)), yq)
        outer.backward()
        total += outer.item()
    meta_opt.step()
    print(f"step {step}: outer {total:.6f}")
