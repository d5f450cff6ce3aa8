"""A hand-written GRU cell unrolled over 12 steps inside one compiled function, truncated BPTT over 2 chunks."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
cell, head = nn.GRUCell(8, 32).to(dev), nn.Linear(32, 1).to(dev)


@torch.compile
def chunk(xs, h):
    outs = []
    for t in range(xs.shape[0]):
        h = cell(xs[t], h)
        outs.append(head(h))
    return torch.stack(outs), h


opt = torch.optim.RMSprop(list(cell.parameters()) + list(head.parameters()), lr=1e-3)
seq, target = torch.randn(24, 4, 8, device=dev), torch.randn(24, 4, 1, device=dev)
h = torch.zeros(4, 32, device=dev)
for c in range(2):
    pred, h = chunk(seq[12 * c:12 * (c + 1)], h)
    loss = (pred - target[12 * c:12 * (c + 1)]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    h = h.detach()
    print(f"chunk {c}: loss {loss.item():.6f}")
