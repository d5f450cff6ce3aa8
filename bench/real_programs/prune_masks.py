"""Magnitude pruning with torch.nn.utils.prune: masks applied by forward pre-hooks (weight = weight_orig * mask),
pruned globally by L1 after step 2, then made permanent; the model compiled, SGD with Nesterov; 5 steps."""
import torch
from torch import nn
from torch.nn.utils import prune

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3)).to(dev)
layers = [(model[0], "weight"), (model[2], "weight"), (model[4], "weight")]
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
x, y = torch.randn(32, 20, device=dev), torch.randint(0, 3, (32,), device=dev)
for step in range(5):
    if step == 2:
        prune.global_unstructured(layers, pruning_method=prune.L1Unstructured, amount=0.5)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    loss = nn.functional.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
for module, name in layers:
    prune.remove(module, name)
print("zeros:", sum(int((m.weight == 0).sum()) for m, _ in layers))
