"""A GAN whose discriminator uses spectral norm (power iteration updating u and v in place each forward) and the
generator weight norm; hinge loss, Adam with betas (0, 0.9), discriminator and generator compiled; 4 steps."""
import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
gen = nn.Sequential(weight_norm(nn.Linear(8, 64)), nn.ReLU(), weight_norm(nn.Linear(64, 16)), nn.Tanh()).to(dev)
disc = nn.Sequential(spectral_norm(nn.Linear(16, 64)), nn.LeakyReLU(0.2), spectral_norm(nn.Linear(64, 1))).to(dev)
cg, cd = torch.compile(gen), torch.compile(disc)
opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.0, 0.9))
opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.0, 0.9))
for step in range(4):
    real = torch.randn(32, 16, device=dev) * 0.5
    fake = cg(torch.randn(32, 8, device=dev))
    loss_d = torch.relu(1 - cd(real)).mean() + torch.relu(1 + cd(fake.detach())).mean()
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = -cd(fake).mean()
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    print(f"step {step}: d {loss_d.item():.6f} g {loss_g.item():.6f}")
