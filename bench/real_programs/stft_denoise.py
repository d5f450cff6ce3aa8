"""A spectral denoiser: stft, a learned magnitude mask on complex bins, istft back; 3 steps."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
mask_net = nn.Sequential(nn.Linear(33, 64), nn.ReLU(), nn.Linear(64, 33), nn.Sigmoid()).to(dev)
window = torch.hann_window(64, device=dev)


@torch.compile
def denoise(noisy):
    spec = torch.stft(noisy, 64, hop_length=16, window=window, return_complex=True)  # [b, 33, frames]
    mask = mask_net(spec.abs().transpose(1, 2)).transpose(1, 2)
    return torch.istft(spec * mask, 64, hop_length=16, window=window, length=noisy.shape[-1])


opt = torch.optim.Adam(mask_net.parameters(), lr=1e-3)
t = torch.linspace(0, 1, 512, device=dev)
clean = torch.sin(2 * torch.pi * 40 * t).expand(3, -1)
noisy = clean + 0.3 * torch.randn(3, 512, device=dev)
for step in range(3):
    loss = (denoise(noisy) - clean).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
