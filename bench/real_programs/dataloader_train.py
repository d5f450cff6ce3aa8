"""An MLP classifier fed by a DataLoader with 2 worker processes and a seeded shuffle; AdamW, OneCycleLR, clipping."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

dev = "cuda" if torch.cuda.is_available() else "cpu"


class Blobs(Dataset):
    def __init__(self, n=96):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 20, generator=g)
        self.y = (self.x[:, :3].sum(1) > 0).long()
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return self.x[i] + 0.01 * torch.randn(20), self.y[i]  # per-worker augmentation noise, seeded by the loader


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.LayerNorm(64), nn.SiLU(), nn.Dropout(0.0), nn.Linear(64, 2)).to(dev)
    compiled = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(Blobs(), batch_size=16, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(2))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=len(loader))
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(compiled(x.to(dev)), y.to(dev), label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        sched.step()
        print(f"step {step}: loss {loss.item():.6f}")
