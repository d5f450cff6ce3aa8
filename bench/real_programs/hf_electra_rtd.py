"""ELECTRA's replaced-token detection: a small generator (masked LM) samples replacements for masked tokens, a
discriminator classifies each token as original or replaced with a binary cross-entropy; both from configs,
the discriminator compiled, the generator's sampling by `torch.multinomial` in eager; AdamW, 3 steps."""
import torch
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
small = dict(vocab_size=128, embedding_size=32, num_hidden_layers=2, num_attention_heads=2,
             max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
generator = ElectraForMaskedLM(ElectraConfig(hidden_size=32, intermediate_size=64, **small)).to(dev)
discriminator = ElectraForPreTraining(ElectraConfig(hidden_size=64, intermediate_size=128, **small)).to(dev)
compiled = torch.compile(discriminator)
opt = torch.optim.AdamW([*generator.parameters(), *discriminator.parameters()], lr=1e-3)
tokens = torch.randint(5, 128, (4, 16), device=dev)
for step in range(3):
    masked = torch.rand(tokens.shape, device=dev) < 0.15
    inputs = tokens.masked_fill(masked, 4)  # 4: the [MASK] id here
    gen = generator(input_ids=inputs, labels=tokens.masked_fill(~masked, -100))
    with torch.no_grad():
        probs = gen.logits.softmax(-1)
        sampled = torch.multinomial(probs.view(-1, 128), 1).view(tokens.shape)
    corrupted = torch.where(masked, sampled, tokens)
    disc = compiled(input_ids=corrupted, labels=(corrupted != tokens).long())
    loss = gen.loss + 50 * disc.loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: generator {gen.loss.item():.5f} discriminator {disc.loss.item():.5f}")
