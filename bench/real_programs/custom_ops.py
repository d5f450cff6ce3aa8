"""A straight-through quantizer (autograd.Function) and a torch.library custom op with its own backward; 3 steps."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"


class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        return torch.round(x / scale) * scale
    @staticmethod
    def backward(ctx, g):
        return g, None


@torch.library.custom_op("realprog::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.tanh(x * alpha)


@scaled_tanh.register_fake
def _(x, alpha):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.alpha = inputs[1]
    ctx.save_for_backward(output)


def _backward(ctx, g):
    (y,) = ctx.saved_tensors
    return g * ctx.alpha * (1 - y * y), None


scaled_tanh.register_autograd(_backward, setup_context=_setup)


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(24, 48), nn.Linear(48, 4)
    def forward(self, x):
        w = RoundSTE.apply(self.l1.weight, 1 / 64)
        h = scaled_tanh(nn.functional.linear(x, w, self.l1.bias), 1.5)
        return self.l2(h)


torch.manual_seed(0)
model = QNet().to(dev)
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 24, device=dev), torch.randint(0, 4, (32,), device=dev)
for step in range(3):
    loss = nn.functional.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.6f}")
