"""Hugging Face Qwen2-MoE from a config: top-2 routing over 4 experts plus a gated shared expert, the router's
load-balancing loss added to the LM loss, grouped-query attention; AdamW, the model compiled; 3 steps."""
import torch
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = Qwen2MoeForCausalLM(Qwen2MoeConfig(
    hidden_size=64, intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=64,
    num_experts=4, num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=128, max_position_embeddings=64, output_router_logits=True, router_aux_loss_coef=0.01)).to(dev)
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, 128, (2, 16), device=dev)
for step in range(3):
    out = compiled(input_ids=data, labels=data)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    print(f"step {step}: loss {out.loss.item():.5f} aux {out.aux_loss.item():.5f}")
