"""Attention over padded sets where some queries may attend to nothing: a row of the mask all False makes softmax
of all -inf, NaN, which the model zeroes with `nan_to_num` before the output projection, as set encoders do;
a masked mean pools it; Adam, the model compiled; 3 steps."""
import torch
from torch import nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class SetAttention(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        allowed = valid[:, None, :, None] & valid[:, None, None, :]  # padded queries see nothing
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)
        y = self.out((weights @ v).transpose(1, 2).reshape(b, n, d)) + x
        pooled = (y * valid[..., None]).sum(1) / valid.sum(1, keepdim=True)
        return self.head(pooled).squeeze(-1)


model = SetAttention().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(4, 10, 32, device=dev)
lengths = torch.tensor([10, 7, 3, 5], device=dev)
valid = torch.arange(10, device=dev)[None, :] < lengths[:, None]
target = torch.randn(4, device=dev)
for step in range(3):
    loss = nn.functional.mse_loss(compiled(x, valid), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
