"""Attention with rotary embeddings in complex form (as the original LLaMA code: view_as_complex, a complex
multiply by precomputed polar frequencies, view_as_real), causal softmax written out; AdamW; 4 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


def frequencies(dim: int, length: int) -> torch.Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    return torch.polar(torch.ones(length, dim // 2), torch.outer(torch.arange(length).float(), inv))


def rotate(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs).flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, length: int = 16) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.register_buffer("freqs", frequencies(dim // heads, length), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, self.freqs[:t]), rotate(k, self.freqs[:t])
        scores = q @ k.transpose(-1, -2) / (c // self.heads) ** 0.5
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        return self.out((F.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, t, c))


model = nn.Sequential(nn.Linear(8, 32), Attention(), nn.LayerNorm(32), nn.Linear(32, 8)).to(dev)
model[1].freqs = model[1].freqs.to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    x = torch.randn(4, 16, 8, device=dev)
    loss = F.mse_loss(compiled(x), x.roll(1, 1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
