"""WGAN with gradient penalty: the critic's input gradient by autograd.grad(create_graph=True) through the eager
critic (compiled code has no double backward), its losses through the compiled one; RMSprop critic, Adam
generator, the critic's weights clamped in place after each step."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)).to(dev)
D = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(dev)
cG, cD = torch.compile(G), torch.compile(D)
oG = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.9))
oD = torch.optim.RMSprop(D.parameters(), lr=5e-4)
real = torch.randn(16, 16, device=dev)
for step in range(3):
    fake = cG(torch.randn(16, 8, device=dev)).detach()
    eps = torch.rand(16, 1, device=dev)
    mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
    (grad,) = torch.autograd.grad(D(mixed).sum(), mixed, create_graph=True)
    penalty = ((grad.norm(dim=1) - 1) ** 2).mean()
    d_loss = cD(fake).mean() - cD(real).mean() + 10 * penalty
    oD.zero_grad()
    d_loss.backward()
    oD.step()
    with torch.no_grad():
        for p in D.parameters():
            p.clamp_(-0.5, 0.5)
    g_loss = -cD(cG(torch.randn(16, 8, device=dev))).mean()
    oG.zero_grad()
    g_loss.backward()
    oG.step()
    print(f"step {step}: d {d_loss.item():.5f} gp {penalty.item():.5f} g {g_loss.item():.5f}")
