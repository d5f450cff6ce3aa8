"""Hugging Face Swin Transformer from a config (shifted windows: torch.roll, window partition views, relative
position bias tables), image classification, AdamW; 3 steps."""
import torch
from transformers import SwinConfig, SwinForImageClassification

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = SwinForImageClassification(SwinConfig(
    image_size=32, patch_size=2, num_channels=3, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4,
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0, num_labels=5)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
images = torch.randn(2, 3, 32, 32, device=dev)
labels = torch.tensor([1, 4], device=dev)
for step in range(3):
    loss = compiled(pixel_values=images, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
