"""Training under torch.compile(mode="reduce-overhead"): on CUDA the compiled forward and backward are replayed as
CUDA graphs (static input buffers, a warm-up run, then replays), a GELU MLP with LayerNorm, Adam; 5 steps. On a CPU
the mode compiles as plain inductor."""
import torch
from torch import nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(24, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64), nn.GELU(),
                      nn.Linear(64, 4)).to(dev)
compiled = torch.compile(model, mode="reduce-overhead")
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
batches = [(torch.randn(32, 24, device=dev), torch.randint(0, 4, (32,), device=dev)) for _ in range(5)]
for step, (x, y) in enumerate(batches):
    loss = nn.functional.cross_entropy(compiled(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
