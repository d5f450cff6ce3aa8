"""Hugging Face ConvNeXt from a config (7x7 depthwise convolutions, layer norm over channels-last activations,
layer scale), image classification with SGD and momentum; 3 steps."""
import torch
from transformers import ConvNextConfig, ConvNextForImageClassification

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = ConvNextForImageClassification(ConvNextConfig(
    num_channels=3, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, patch_size=2, drop_path_rate=0.0,
    num_labels=4, image_size=32)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
images = torch.randn(4, 3, 32, 32, device=dev)
labels = torch.tensor([0, 1, 2, 3], device=dev)
for step in range(3):
    loss = compiled(pixel_values=images, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
