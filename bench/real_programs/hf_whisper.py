"""Hugging Face Whisper from a config (a conv front end over log-mel frames, an encoder-decoder), trained 3 steps
with AdamW on random audio features and token labels; the whole model compiled."""
import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
config = WhisperConfig(vocab_size=96, num_mel_bins=16, encoder_layers=1, decoder_layers=1, d_model=32,
                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                       max_source_positions=20, max_target_positions=16, pad_token_id=0, bos_token_id=1,
                       eos_token_id=2, decoder_start_token_id=1)
model = WhisperForConditionalGeneration(config).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
features = torch.randn(2, 16, 40, device=dev)  # (batch, mel bins, frames): frames = 2 * max_source_positions
labels = torch.randint(3, 96, (2, 8), device=dev)
for step in range(3):
    loss = compiled(input_features=features, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
