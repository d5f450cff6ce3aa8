"""Mixtral (sparse mixture of experts, top-2 routing, router load-balancing loss) from a config; 3 AdamW steps."""
import torch
from transformers import MixtralConfig, MixtralForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = MixtralForCausalLM(MixtralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=200,
                                         num_local_experts=4, num_experts_per_tok=2, output_router_logits=True,
                                         max_position_embeddings=64)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, 200, (2, 16), device=dev)
for step in range(3):
    out = compiled(input_ids=data, labels=data)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    print(f"step {step}: loss {out.loss.item():.5f} aux {out.aux_loss.item():.5f}")
