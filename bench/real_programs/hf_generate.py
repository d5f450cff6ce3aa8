"""GPT-2 greedy generation with a compiled forward (HF generate, dynamic KV cache): 12 new tokens."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=200, n_positions=64)).eval()
model.forward = torch.compile(model.forward)
prompt = torch.randint(0, 200, (1, 5))
out = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
print(out.tolist())
