"""Selective activation checkpointing (torch.utils.checkpoint with a context_fn from
create_selective_checkpoint_contexts): matmuls saved, pointwise ops recomputed in the backward, inside a compiled
MLP block stack; AdamW; 3 steps."""
import functools

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
SAVE = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}


def policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in SAVE else CheckpointPolicy.PREFER_RECOMPUTE


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.fc1, self.fc2 = nn.Linear(32, 96), nn.Linear(96, 32)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False,
                           context_fn=functools.partial(create_selective_checkpoint_contexts, policy))
        return x


model = Net().to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(8, 32, device=dev), torch.randn(8, 32, device=dev)
for step in range(3):
    loss = nn.functional.mse_loss(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
