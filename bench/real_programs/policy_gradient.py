"""REINFORCE: a compiled policy's logits, actions sampled in eager code from a Categorical, the log-probabilities
and entropy bonus compiled in a loss function of their own; returns normalized per episode; 4 updates."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
policy = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 4)).to(dev)
compiled = torch.compile(policy)


@torch.compile
def pg_loss(logits, actions, returns):
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp.gather(-1, actions[..., None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    advantage = (returns - returns.mean()) / (returns.std() + 1e-6)
    return -(chosen * advantage).mean() - 0.01 * entropy.mean()


opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
states = torch.randn(16, 6, device=dev)
for update in range(4):
    logits = compiled(states)
    actions = torch.distributions.Categorical(logits=logits.detach()).sample()
    rewards = (actions == 2).float() - 0.1 * actions.float()
    returns = torch.flip(torch.cumsum(torch.flip(rewards, [0]), 0), [0])
    loss = pg_loss(logits, actions, returns)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"update {update}: loss {loss.item():.5f} reward {rewards.sum().item():.2f}")
