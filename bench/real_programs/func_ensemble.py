"""An ensemble of 4 MLPs run as one with torch.func: stack_module_state, vmap over functional_call, trained
with Adam on the stacked parameters; the vmapped forward compiled; 5 steps."""
import copy

import torch
from torch import nn
from torch.func import functional_call, stack_module_state

torch.manual_seed(0)
models = [nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1)) for _ in range(4)]
params, buffers = stack_module_state(models)
base = copy.deepcopy(models[0]).to("meta")


def one(p, b, x):
    return functional_call(base, (p, b), (x,))


@torch.compile
def ensemble(p, b, x):
    return torch.vmap(one, in_dims=(0, 0, None))(p, b, x)


opt = torch.optim.Adam(params.values(), lr=1e-2)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for step in range(5):
    preds = ensemble(params, buffers, x)
    loss = ((preds - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
