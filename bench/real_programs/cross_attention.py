"""nn.MultiheadAttention as cross attention in training mode, a key padding mask, averaged attention weights
returned and regularized (entropy); 3 steps."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
attn = nn.MultiheadAttention(32, 4, batch_first=True, dropout=0.0).to(dev)
head = nn.Linear(32, 1).to(dev)


def step_loss(q, kv, pad):
    out, weights = attn(q, kv, kv, key_padding_mask=pad, need_weights=True, average_attn_weights=True)
    entropy = -(weights.clamp_min(1e-9).log() * weights).sum(-1).mean()
    return head(out).pow(2).mean() + 0.01 * entropy


compiled = torch.compile(step_loss)
opt = torch.optim.AdamW(list(attn.parameters()) + list(head.parameters()), lr=1e-3)
q, kv = torch.randn(3, 5, 32, device=dev), torch.randn(3, 9, 32, device=dev)
pad = torch.zeros(3, 9, dtype=torch.bool, device=dev)
pad[0, 6:] = True
pad[2, 4:] = True
for step in range(3):
    loss = compiled(q, kv, pad)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
