"""A small regression net fitted with L-BFGS (strong Wolfe line search): each step calls the closure several times,
forward and backward through the compiled model; 3 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 32), nn.Tanh(), nn.Linear(32, 1)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5, history_size=5, line_search_fn="strong_wolfe")
x = torch.randn(128, 3, device=dev)
y = (x[:, :1] * x[:, 1:2]).tanh() + 0.05 * torch.randn(128, 1, device=dev)
calls = 0


def closure() -> torch.Tensor:
    global calls
    calls += 1
    opt.zero_grad()
    loss = F.mse_loss(compiled(x), y)
    loss.backward()
    return loss


for step in range(3):
    loss = opt.step(closure)
    print(f"step {step}: loss {loss.item():.6f} closure calls {calls}")
