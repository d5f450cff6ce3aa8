"""Hugging Face BART from a config: encoder-decoder with cross-attention, labels shifted into decoder inputs, a
padded source batch, AdamW and gradient clipping; 3 steps."""
import torch
from transformers import BartConfig, BartForConditionalGeneration

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = BartForConditionalGeneration(BartConfig(
    vocab_size=90, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=40,
    dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1, bos_token_id=0,
    eos_token_id=2, decoder_start_token_id=2)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
src = torch.randint(3, 90, (2, 10), device=dev)
src_mask = torch.ones_like(src)
src[1, 7:], src_mask[1, 7:] = 1, 0
labels = torch.randint(3, 90, (2, 8), device=dev)
for step in range(3):
    loss = compiled(input_ids=src, attention_mask=src_mask, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
