"""GPT-NeoX (partial rotary embeddings, parallel residual) from a config, 3 AdamW steps with a cosine schedule."""
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, get_cosine_schedule_with_warmup

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, rotary_pct=0.25, max_position_embeddings=64)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = get_cosine_schedule_with_warmup(opt, 1, 3)
data = torch.randint(0, 200, (2, 20), device=dev)
for step in range(3):
    loss = compiled(input_ids=data, labels=data).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    print(f"step {step}: loss {loss.item():.6f}")
