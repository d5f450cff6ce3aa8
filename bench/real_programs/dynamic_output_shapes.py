"""Data-dependent output shapes inside a compiled function (capture_dynamic_output_shape_ops): the tokens above a
score threshold selected with nonzero/masked_select and pooled, a routing step whose size depends on the values;
the function compiled with fullgraph, its gradients taken; 4 batches."""
import torch
import torch._dynamo
from torch import nn

torch._dynamo.config.capture_dynamic_output_shape_ops = True
torch._dynamo.config.capture_scalar_outputs = True
torch.manual_seed(0)
score = nn.Linear(16, 1)
proj = nn.Linear(16, 8)


@torch.compile(fullgraph=True)
def pooled(x):
    s = score(x).squeeze(-1)
    keep = torch.nonzero(s > 0.0).squeeze(-1)
    chosen = x.index_select(0, keep)
    weights = torch.softmax(s.index_select(0, keep), dim=0)
    return (proj(chosen) * weights.unsqueeze(-1)).sum(0), keep.numel()


opt = torch.optim.SGD(list(score.parameters()) + list(proj.parameters()), lr=0.1)
for batch in range(4):
    x = torch.randn(40, 16)
    out, kept = pooled(x)
    loss = out.pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"batch {batch}: kept {kept} loss {loss.item():.5f}")
