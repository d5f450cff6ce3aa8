"""A tied-embedding language model (the output head shares the embedding's weight) with three parameter groups
(no weight decay for norms and biases, a smaller lr for the embedding), Adagrad, CosineAnnealingWarmRestarts; 5
steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class TiedLM(nn.Module):
    def __init__(self, vocab=64, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mix = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.norm = nn.LayerNorm(d)
    def forward(self, idx):
        h = self.emb(idx)
        h = self.norm(h + self.mix(h))
        return h @ self.emb.weight.t()


model = TiedLM().to(dev)
compiled = torch.compile(model)
decay = [p for n, p in model.named_parameters() if n.startswith("mix") and n.endswith("weight")]
no_decay = [p for n, p in model.named_parameters() if n.startswith(("norm", "mix")) and not n.endswith("weight")]
no_decay += [model.norm.weight]
opt = torch.optim.Adagrad([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0},
                           {"params": [model.emb.weight], "lr": 0.02}], lr=0.05)
sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2)
data = torch.randint(0, 64, (4, 12), device=dev)
for step in range(5):
    logits = compiled(data[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 64), data[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    print(f"step {step}: loss {loss.item():.5f}")
