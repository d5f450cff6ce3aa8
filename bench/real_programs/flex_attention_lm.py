"""A small causal language model whose attention is torch's FlexAttention: a causal block mask, an ALiBi score
modifier and a sliding window, the model compiled (flex_attention lowers to a fused template). On CUDA it trains
with AdamW for 3 steps; on a CPU, where FlexAttention has no backward, it scores 3 batches under no_grad."""
import torch
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
SEQ, HEADS, DIM, WINDOW = 128, 2, 64, 48
slopes = torch.tensor([2.0 ** (-(h + 1)) for h in range(HEADS)], device=dev)


def alibi(score, b, h, q, k):
    return score - slopes[h] * (q - k)


def causal_window(b, h, q, k):
    return (q >= k) & (q - k < WINDOW)


mask = create_block_mask(causal_window, None, None, SEQ, SEQ, device=dev)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        attn = flex_attention(q, k, v, score_mod=alibi, block_mask=mask)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, DIM))
        return x + self.mlp(self.norm2(x))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(DIM, 100)

    def forward(self, ids):
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


model = LM().to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 100, (2, SEQ + 1), device=dev)
train = dev == "cuda"
for step in range(3):
    with torch.set_grad_enabled(train):
        logits = compiled(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 100), ids[:, 1:].reshape(-1))
    if train:
        opt.zero_grad()
        loss.backward()
        opt.step()
    else:
        ids = ids.roll(1, dims=1)
    print(f"step {step}: loss {loss.item():.5f}")
