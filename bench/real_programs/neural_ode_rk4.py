"""A neural ODE integrated with fixed-step RK4 (8 steps, the vector field compiled and called 32 times a forward),
fitted to a spiral's end points; 3 steps of Adam."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
field = nn.Sequential(nn.Linear(3, 32), nn.Softplus(), nn.Linear(32, 2)).to(dev)
compiled = torch.compile(field)


def f(t: float, y: torch.Tensor) -> torch.Tensor:
    return compiled(torch.cat([y, torch.full_like(y[:, :1], t)], -1))


def rk4(y: torch.Tensor, t1: float, steps: int = 8) -> torch.Tensor:
    h, t = t1 / steps, 0.0
    for _ in range(steps):
        k1 = f(t, y)
        k2 = f(t + h / 2, y + h / 2 * k1)
        k3 = f(t + h / 2, y + h / 2 * k2)
        k4 = f(t + h, y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t += h
    return y


opt = torch.optim.Adam(field.parameters(), lr=1e-2)
y0 = torch.randn(16, 2, device=dev)
angle = torch.tensor(1.0, device=dev)
target = y0 @ torch.stack([torch.stack([angle.cos(), -angle.sin()]), torch.stack([angle.sin(), angle.cos()])]) * 0.8
for step in range(3):
    loss = (rk4(y0, 1.0) - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
