"""A Llama-style block written by hand: torch.nn.RMSNorm, rotary embeddings, causal attention, a SwiGLU MLP; bf16
autocast, AdamW (fused on a GPU), gradient clipping; 5 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
D, H, T = 64, 4, 16


def rotary(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.gate, self.up, self.down = nn.Linear(D, 128, bias=False), nn.Linear(D, 128, bias=False), nn.Linear(128, D, bias=False)
        freqs = 1.0 / (10000 ** (torch.arange(0, D // H, 2).float() / (D // H)))
        angles = torch.outer(torch.arange(T).float(), freqs)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
    def forward(self, x):
        b = x.shape[0]
        q, k, v = self.qkv(self.n1(x)).view(b, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
        q, k = rotary(q, self.cos, self.sin), rotary(k, self.cos, self.sin)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, T, D))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


model = nn.Sequential(Block(), Block()).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=dev == "cuda")
x, target = torch.randn(2, T, D, device=dev), torch.randn(2, T, D, device=dev)
for step in range(5):
    with torch.autocast(dev, dtype=torch.bfloat16):
        loss = F.mse_loss(compiled(x).float(), target)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
