"""An MLP of many activations inductor decomposes its own way (SiLU, Mish, Hardswish, ELU, softplus with beta and
threshold, tanh-approximated GELU, LeakyReLU), with dropout off, trained 3 steps with AdamW."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Mix(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(7))
        self.head = nn.Linear(d, 1)
    def forward(self, x):
        acts = [F.silu, F.mish, F.hardswish, F.elu, lambda h: F.softplus(h, beta=2.0, threshold=5.0),
                lambda h: F.gelu(h, approximate="tanh"), lambda h: F.leaky_relu(h, 0.1)]
        for layer, act in zip(self.layers, acts):
            x = x + act(layer(x))
        return self.head(x)


model = Mix().to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 32, device=dev), torch.randn(16, 1, device=dev)
for step in range(3):
    loss = F.smooth_l1_loss(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
