"""Attention through scaled_dot_product_attention four ways: a boolean mask, an additive float mask, is_causal,
and grouped-query attention (enable_gqa); one block each, trained 3 steps with Adam."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
B, H, KV, T, D = 2, 4, 2, 12, 8


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.kv, self.o = nn.Linear(32, H * D), nn.Linear(32, 2 * KV * D), nn.Linear(H * D, 32)
    def forward(self, x, lengths):
        q = self.q(x).view(B, T, H, D).transpose(1, 2)
        k, v = self.kv(x).view(B, T, 2, KV, D).permute(2, 0, 3, 1, 4)
        keep = torch.arange(T, device=x.device)[None, :] < lengths[:, None]
        bool_mask = keep[:, None, None, :]
        float_mask = torch.zeros(B, 1, T, T, device=x.device).masked_fill(~bool_mask, -1e4)
        kf, vf = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        outs = [F.scaled_dot_product_attention(q, kf, vf, attn_mask=bool_mask),
                F.scaled_dot_product_attention(q, kf, vf, attn_mask=float_mask),
                F.scaled_dot_product_attention(q, kf, vf, is_causal=True),
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)]
        return sum(self.o(o.transpose(1, 2).reshape(B, T, H * D)) for o in outs)


model = Attn().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, lengths, target = torch.randn(B, T, 32, device=dev), torch.tensor([12, 7], device=dev), torch.randn(B, T, 32, device=dev)
for step in range(3):
    loss = F.mse_loss(compiled(x, lengths), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
