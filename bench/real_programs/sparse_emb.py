"""A bag-of-words classifier with a sparse-gradient embedding (SparseAdam) and a dense head (Adam)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
emb = nn.EmbeddingBag(500, 16, mode="mean", sparse=True)
head = nn.Linear(16, 3)
def model(tokens, offsets):
    return head(emb(tokens, offsets))
compiled = torch.compile(model)
opt_sparse = torch.optim.SparseAdam(list(emb.parameters()), lr=1e-2)
opt = torch.optim.Adam(head.parameters(), lr=1e-2)
tokens = torch.randint(0, 500, (40,))
offsets = torch.tensor([0, 10, 25, 31])
labels = torch.tensor([0, 1, 2, 1])
for step in range(3):
    loss = nn.functional.cross_entropy(compiled(tokens, offsets), labels)
    opt.zero_grad()
    opt_sparse.zero_grad()
    loss.backward()
    opt.step()
    opt_sparse.step()
    print(f"step {step}: loss {loss.item():.6f}")
