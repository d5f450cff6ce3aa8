"""Hugging Face wav2vec2 from a config: a convolutional feature encoder with group norm, a convolutional
positional embedding under weight norm, a transformer encoder and a CTC loss on padded labels, AdamW; 3 steps."""
import torch
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = Wav2Vec2ForCTC(Wav2Vec2Config(
    vocab_size=12, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
    num_conv_pos_embedding_groups=4, feat_extract_norm="group", hidden_dropout=0.0, attention_dropout=0.0,
    activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0, final_dropout=0.0,
    pad_token_id=0, ctc_loss_reduction="mean")).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
audio = torch.randn(2, 800, device=dev)
labels = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, -100, -100]], device=dev)
for step in range(3):
    loss = compiled(input_values=audio, labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.5f}")
