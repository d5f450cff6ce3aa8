"""Hugging Face SegFormer from a config: overlapping patch embeddings, efficient self-attention with spatial
reduction, Mix-FFN's depthwise convolution, the all-MLP decoder upsampling every stage; semantic segmentation
with an ignore label, AdamW, the model compiled; 2 steps."""
import torch
from transformers import SegformerConfig, SegformerForSemanticSegmentation

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = SegformerForSemanticSegmentation(SegformerConfig(
    num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2], hidden_sizes=[16, 32],
    patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32,
    num_labels=5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
    drop_path_rate=0.0, semantic_loss_ignore_index=255)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
images = torch.randn(2, 3, 64, 64, device=dev)
labels = torch.randint(0, 5, (2, 64, 64), device=dev)
labels[:, :8] = 255  # an unlabeled border
for step in range(2):
    loss = compiled(pixel_values=images, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
