"""Hugging Face OPT from a config: learned positions with OPT's offset of 2, pre-layer-norm decoder, dropout in
attention and residuals, a padded batch with its attention mask; AdamW with a linear warmup, the model compiled;
3 steps."""
import torch
from transformers import OPTConfig, OPTForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = OPTForCausalLM(OPTConfig(
    hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
    max_position_embeddings=64, word_embed_proj_dim=64, dropout=0.1, attention_dropout=0.1)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 2))
data = torch.randint(3, 128, (2, 16), device=dev)
mask = torch.ones_like(data)
mask[1, 12:] = 0  # the second sequence is 12 tokens, padded
labels = data.masked_fill(mask == 0, -100)
for step in range(3):
    loss = compiled(input_ids=data, attention_mask=mask, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    schedule.step()
    print(f"step {step}: loss {loss.item():.5f}")
