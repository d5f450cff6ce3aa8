"""A ViT classifier from a Hugging Face config (random weights), 3 AdamW steps on random images, label smoothing."""
import torch
from transformers import ViTConfig, ViTForImageClassification

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = ViTForImageClassification(ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=128, num_labels=5,
                                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
pixels, labels = torch.randn(4, 3, 32, 32, device=dev), torch.randint(0, 5, (4,), device=dev)
for step in range(3):
    logits = compiled(pixel_values=pixels).logits
    loss = torch.nn.functional.cross_entropy(logits, labels, label_smoothing=0.1)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
