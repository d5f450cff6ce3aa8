"""T5 (encoder-decoder) from a config, trained 3 AdamW steps on random token pairs; dropout off."""
import torch
from transformers import T5Config, T5ForConditionalGeneration

torch.manual_seed(0)
model = T5ForConditionalGeneration(T5Config(vocab_size=200, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                                            dropout_rate=0.0, decoder_start_token_id=0))
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
src, tgt = torch.randint(1, 200, (2, 12)), torch.randint(1, 200, (2, 8))
for step in range(3):
    loss = compiled(input_ids=src, labels=tgt).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
