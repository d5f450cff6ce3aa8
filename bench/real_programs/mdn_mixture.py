"""A mixture density network: the head's outputs parametrize torch.distributions.MixtureSameFamily of Normals,
trained on the negative log-likelihood (logsumexp over components) with a softplus scale; 5 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical, MixtureSameFamily, Normal

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class MDN(nn.Module):
    def __init__(self, k: int = 5) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.head = nn.Linear(64, 3 * k)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, mean, raw = self.head(self.body(x)).chunk(3, -1)
        return logits, mean, F.softplus(raw) + 1e-3


model = MDN().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(5):
    x = torch.randn(64, 4, device=dev)
    y = torch.sin(x.sum(-1)) + 0.1 * torch.randn(64, device=dev)
    logits, mean, scale = compiled(x)
    mixture = MixtureSameFamily(Categorical(logits=logits), Normal(mean, scale))
    loss = -mixture.log_prob(y).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: nll {loss.item():.6f}")
