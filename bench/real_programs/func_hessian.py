"""torch.func second order: the Hessian of a small network's loss in its inputs (jacfwd over jacrev), a
Hessian-vector product through vjp, and a Newton-like step on the inputs; the function transforms compiled."""
import torch
from torch import nn
from torch.func import functional_call, grad, hessian, jvp

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
params = {k: v.detach() for k, v in model.named_parameters()}
target = torch.randn(())


def loss(x):
    return (functional_call(model, params, (x,)).squeeze() - target) ** 2


@torch.compile
def curvature(x, v):
    h = hessian(loss)(x)
    _, hvp = jvp(grad(loss), (x,), (v,))
    return h, hvp


x = torch.randn(6)
for step in range(3):
    h, hvp = curvature(x, torch.ones(6))
    g = grad(loss)(x)
    x = x - torch.linalg.solve(h + 0.5 * torch.eye(6), g)
    print(f"step {step}: loss {loss(x).item():.6f} hvp-sum {hvp.sum().item():.5f} trace {h.trace().item():.5f}")
