"""A VQ-VAE: nearest-codebook quantization (cdist, argmin), the straight-through estimator
((q - z).detach() + z), commitment loss, and the codebook updated by EMA in place under no_grad; 4 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class VQVAE(nn.Module):
    def __init__(self, codes: int = 32, dim: int = 8) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, dim))
        self.dec = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 24))
        self.register_buffer("codebook", torch.randn(codes, dim))
        self.register_buffer("counts", torch.ones(codes))
        self.register_buffer("sums", self.codebook.clone())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z = self.enc(x)
        index = torch.cdist(z, self.codebook).argmin(-1)
        q = self.codebook[index]
        commit = F.mse_loss(z, q.detach())
        return self.dec((q - z).detach() + z), commit, index


model = VQVAE().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(4):
    x = torch.randn(64, 24, device=dev)
    recon, commit, index = compiled(x)
    loss = F.mse_loss(recon, x) + 0.25 * commit
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        z = model.enc(x)
        onehot = F.one_hot(index, model.codebook.shape[0]).float()
        model.counts.mul_(0.9).add_(onehot.sum(0), alpha=0.1)
        model.sums.mul_(0.9).add_(onehot.t() @ z, alpha=0.1)
        model.codebook.copy_(model.sums / model.counts.clamp_min(1e-5).unsqueeze(1))
    print(f"step {step}: loss {loss.item():.6f} codes used {index.unique().numel()}")
