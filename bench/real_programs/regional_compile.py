"""Regional compilation: each decoder block compiled on its own (as FSDP2 users do), bf16 autocast, AdamW, 6 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d=64, h=4):
        super().__init__()
        self.h = h
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.gate, self.down = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False), nn.Linear(2 * d, d, bias=False)
    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.h, d // self.h).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class LM(nn.Module):
    def __init__(self, vocab=256, d=64, n=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.norm = nn.RMSNorm(d)
    def forward(self, idx):
        x = self.emb(idx)
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.emb.weight.t()  # tied output head


model = LM().to(dev)
for block in model.blocks:
    block.compile()
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)
data = torch.randint(0, 256, (4, 33), device=dev)
for step in range(6):
    with torch.autocast(dev, dtype=torch.bfloat16):
        logits = model(data[:, :-1])
    loss = F.cross_entropy(logits.float().flatten(0, 1), data[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
