"""A VAE: reparameterized sampling from torch.distributions, KL term, Bernoulli likelihood; 3 steps."""
import torch
import torch.nn as nn
from torch.distributions import Normal, kl_divergence

torch.manual_seed(0)
class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(64, 2 * 8)
        self.dec = nn.Linear(8, 64)
    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, dim=-1)
        q = Normal(mu, (0.5 * logvar).exp())
        z = q.rsample()
        recon = nn.functional.binary_cross_entropy_with_logits(self.dec(z), x, reduction="sum")
        return recon + kl_divergence(q, Normal(torch.zeros_like(mu), torch.ones_like(mu))).sum()
model = VAE()
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = (torch.rand(16, 64) > 0.5).float()
for step in range(3):
    loss = compiled(x)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
