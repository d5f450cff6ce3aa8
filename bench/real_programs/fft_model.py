"""A spectral (FNO-style) layer: rfft, complex weights multiplied in the frequency domain, irfft; trained 3 steps."""
import torch
import torch.nn as nn

torch.manual_seed(0)
class Spectral(nn.Module):
    def __init__(self, ch=8, modes=6):
        super().__init__()
        self.modes = modes
        self.w = nn.Parameter(torch.randn(ch, ch, modes, dtype=torch.cfloat) * 0.1)
        self.lin = nn.Linear(ch, ch)
    def forward(self, x):  # x: (b, ch, n)
        xf = torch.fft.rfft(x)
        out = torch.zeros_like(xf)
        out[:, :, :self.modes] = torch.einsum("bim,iom->bom", xf[:, :, :self.modes], self.w)
        y = torch.fft.irfft(out, n=x.shape[-1])
        return torch.relu(y + self.lin(x.transpose(1, 2)).transpose(1, 2))
model = Spectral()
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(4, 8, 32)
target = torch.randn(4, 8, 32)
for step in range(3):
    loss = (compiled(x) - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
