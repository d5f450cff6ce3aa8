"""A CNN with BatchNorm trained 4 steps (its running statistics updated in place inside the compiled graph), then
evaluated in eval mode (a recompile that reads them)."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2),
                      nn.BatchNorm2d(8, momentum=None), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(8, 4)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
for step in range(4):
    x, y = torch.randn(8, 3, 12, 12, device=dev), torch.randint(0, 4, (8,), device=dev)
    loss = nn.functional.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
model.eval()
with torch.no_grad():
    print("eval", compiled(torch.randn(2, 3, 12, 12, device=dev)).argmax(-1).tolist())
print("running_var", model[1].running_var[:3].tolist(), model[4].num_batches_tracked.item())
