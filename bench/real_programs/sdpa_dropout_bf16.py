"""A causal language model block in bf16 autocast with dropout inside SDPA (dropout_p=0.1), tied input and output
embeddings, label-smoothed cross entropy, AdamW with gradient clipping; 4 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class LM(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, width)
        self.norm = nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, c // self.heads).transpose(1, 3).unbind(2)
        attn = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x @ self.embed.weight.t()


model = LM().to(dev).train()
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    tokens = torch.randint(0, 64, (4, 17), device=dev)
    with torch.autocast(dev, dtype=torch.bfloat16):
        logits = compiled(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, 64), tokens[:, 1:].reshape(-1), label_smoothing=0.1)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
