"""CLIP-style contrastive training: two encoders, normalized embeddings, a learned temperature, symmetric loss."""
import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Clip(nn.Module):
    def __init__(self):
        super().__init__()
        self.image = nn.Sequential(nn.Linear(48, 64), nn.GELU(), nn.Linear(64, 32))
        self.text = nn.Sequential(nn.Embedding(100, 32), nn.LayerNorm(32))
        self.logit_scale = nn.Parameter(torch.tensor(2.659))
    def forward(self, images, tokens):
        i = F.normalize(self.image(images), dim=-1)
        t = F.normalize(self.text(tokens).mean(1), dim=-1)
        logits = self.logit_scale.exp().clamp(max=100) * i @ t.t()
        labels = torch.arange(len(images), device=images.device)
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


model = Clip().to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.2)
for step in range(4):
    loss = compiled(torch.randn(16, 48, device=dev), torch.randint(0, 100, (16, 6), device=dev))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f} scale {model.logit_scale.item():.5f}")
