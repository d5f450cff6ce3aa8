"""A neural HMM trained by the forward algorithm in log space: emission and transition scores from a compiled
network, logsumexp recursions over 12 time steps in Python, negative log-likelihood; Adam; 4 steps."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class NeuralHMM(nn.Module):
    def __init__(self, states: int = 6, symbols: int = 10) -> None:
        super().__init__()
        self.start = nn.Parameter(torch.zeros(states))
        self.transition = nn.Sequential(nn.Linear(states, 32), nn.ReLU(), nn.Linear(32, states * states))
        self.emission = nn.Sequential(nn.Linear(states, 32), nn.ReLU(), nn.Linear(32, states * symbols))
        self.states, self.symbols = states, symbols

    def forward(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        eye = torch.eye(self.states, device=self.start.device)
        trans = self.transition(eye).view(self.states, self.states, self.states).diagonal(dim1=0, dim2=1).t()
        emit = self.emission(eye).view(self.states, self.states, self.symbols).diagonal(dim1=0, dim2=1).t()
        return self.start.log_softmax(0), trans.log_softmax(-1), emit.log_softmax(-1)


model = NeuralHMM().to(dev)
compiled = torch.compile(model)
opt = torch.optim.Adam(model.parameters(), lr=0.05)
seqs = torch.randint(0, 10, (8, 12), device=dev)
for step in range(4):
    start, trans, emit = compiled()
    alpha = start + emit[:, seqs[:, 0]].t()
    for t in range(1, seqs.shape[1]):
        alpha = torch.logsumexp(alpha.unsqueeze(-1) + trans, dim=1) + emit[:, seqs[:, t]].t()
    loss = -torch.logsumexp(alpha, -1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: nll {loss.item():.6f}")
