"""Activation offloading with saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks: each tensor autograd
saves is copied to the host in the forward and back to its device for the backward) around a compiled pre-norm
attention block written out (matmul, softmax, a causal mask) and its MLP; AdamW; 3 steps. On a CPU the hooks still
copy every saved tensor. (Not torch's save_on_cpu: its copies are contiguous, and a compiled backward given one
fails its stride assertion on torch 2.11's CUDA, plain or recorded.)"""
import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, width=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x):
        b, s, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (w // self.heads) ** 0.5
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        attn = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, w))
        return x + self.mlp(self.norm2(x))


def offload(t):
    return t.device, t.to("cpu", copy=True)  # keeps the strides


def reload(packed):
    device, t = packed
    return t.to(device, non_blocking=True)


block = Block().to(dev)
head = nn.Linear(32, 1).to(dev)
compiled = torch.compile(block)
opt = torch.optim.AdamW(list(block.parameters()) + list(head.parameters()), lr=1e-3)
x, y = torch.randn(4, 10, 32, device=dev), torch.randn(4, 1, device=dev)
for step in range(3):
    with saved_tensors_hooks(offload, reload):
        pred = head(compiled(x).mean(1))
        loss = nn.functional.mse_loss(pred, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
