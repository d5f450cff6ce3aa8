"""Greedy decoding with a static KV cache written in place by index_copy_ under torch.no_grad, compiled decode step."""
import torch
import torch.nn as nn

torch.manual_seed(0)
D, H, T = 32, 4, 16
class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.o = nn.Linear(D, D)
        self.emb = nn.Embedding(40, D)
        self.head = nn.Linear(D, 40)
        self.register_buffer("k", torch.zeros(1, H, T, D // H))
        self.register_buffer("v", torch.zeros(1, H, T, D // H))
    def forward(self, token, pos):
        x = self.emb(token)[:, None]
        q, k, v = self.qkv(x).view(1, 1, 3, H, D // H).unbind(2)
        self.k.index_copy_(2, pos, k.transpose(1, 2))
        self.v.index_copy_(2, pos, v.transpose(1, 2))
        mask = (torch.arange(T) <= pos).view(1, 1, 1, T)
        att = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), self.k, self.v, attn_mask=mask)
        return self.head(self.o(att.transpose(1, 2).reshape(1, 1, D)))[:, -1]
model = Layer().eval()
step = torch.compile(model)
token = torch.tensor([1])
out = []
with torch.no_grad():
    for t in range(10):
        token = step(token, torch.tensor([t])).argmax(-1)
        out.append(token.item())
print("decoded", out)
