"""A GAN: generator and discriminator compiled separately, two Adam optimizers, detach for the D step."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.LeakyReLU(0.2), nn.Linear(32, 16), nn.Tanh())
D = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
cG, cD = torch.compile(G), torch.compile(D)
oG = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
oD = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
real = torch.randn(32, 16)
for step in range(3):
    z = torch.randn(32, 8)
    fake = cG(z)
    d_loss = F.binary_cross_entropy_with_logits(cD(real), torch.ones(32, 1)) + \
        F.binary_cross_entropy_with_logits(cD(fake.detach()), torch.zeros(32, 1))
    oD.zero_grad()
    d_loss.backward()
    oD.step()
    g_loss = F.binary_cross_entropy_with_logits(cD(fake), torch.ones(32, 1))
    oG.zero_grad()
    g_loss.backward()
    oG.step()
    print(f"step {step}: d {d_loss.item():.5f} g {g_loss.item():.5f}")
