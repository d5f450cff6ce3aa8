"""BERT masked-language-model training from a config with its default dropout, 15% of tokens masked, labels -100
elsewhere; 3 AdamW steps."""
import torch
from transformers import BertConfig, BertForMaskedLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = BertForMaskedLM(BertConfig(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=128, max_position_embeddings=64)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(5, 300, (4, 24), device=dev)
for step in range(3):
    masked = torch.rand(tokens.shape, device=dev) < 0.15
    labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
    loss = compiled(input_ids=torch.where(masked, torch.full_like(tokens, 4), tokens), labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
