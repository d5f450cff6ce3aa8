"""Batched inference under torch.inference_mode with a compiled ResNet-ish model in eval mode, top-5."""
import torch
import torch.nn as nn

torch.manual_seed(0)
def block(c):
    return nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = nn.ModuleList(block(16) for _ in range(2))
        self.fc = nn.Linear(16, 10)
    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = torch.relu(x + b(x))
        return self.fc(x.mean((2, 3)))
model = Net().eval()
for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
        m.running_mean.uniform_(-0.1, 0.1)
        m.running_var.uniform_(0.5, 1.5)
compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
with torch.inference_mode():
    for i in range(2):
        probs = compiled(torch.randn(4, 3, 16, 16)).softmax(-1)
        print(i, probs.topk(5).indices.tolist())
