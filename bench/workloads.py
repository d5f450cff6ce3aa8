"""Benchmark workloads built in the repository: no downloads, seeded.

Each workload is a zero-argument callable doing one unit of work (a forward, or a
training step); `make(name)` builds the model and inputs and returns it. CPU sizes
below; `make(name, device="cuda")` builds GPU sizes (GPU_* constants: GPT-2 small
with 6 layers, seq 1024, batch 8; MLP batch 8192 width 4096; CNN batch 64 x 128 x 128).

    mlp          4-layer MLP forward, batch 64, 512 -> 1024 -> 1024 -> 1024 -> 10
    cnn          small CNN forward (3 conv-BN-ReLU blocks, pool, linear), batch 8 x 3 x 64 x 64
    transformer  GPT-2-style decoder forward: 2 layers, d_model 256, 4 heads, seq 128,
                 batch 4, vocab 1024 (pre-LN, causal SDPA, GELU MLP, tied-free LM head)
    train_step   the same transformer: forward, cross-entropy, backward, AdamW step
    hf_gpt2      Hugging Face GPT-2 (GPT2LMHeadModel from a config, random weights) forward under
                 no_grad: 2 layers, width 256, 4 heads, batch 4 x 128, vocab 1024 (on the GPU: 6 layers,
                 width 768, 12 heads, batch 8 x 512, vocab 50257); needs transformers (`.[bench]`)

All run with autograd enabled (as inside a training script), in train() mode
(there is no dropout, so train mode only makes BatchNorm update its running stats).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

NAMES = ("mlp", "cnn", "transformer", "train_step", "hf_gpt2")


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 1024
    seq: int = 128
    d_model: int = 256
    heads: int = 4
    layers: int = 2
    batch: int = 4


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class MLPBlock(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLPBlock(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        chans = [3, 16, 32, 64]
        layers: list[nn.Module] = []
        for cin, cout in zip(chans, chans[1:]):
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(chans[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# GPU sizes (bench/gpu.py): large enough that a plain call is bound by the GPU, as real runs are.
GPU_GPT = GPTConfig(vocab=50304, seq=1024, d_model=768, heads=12, layers=6, batch=8)  # GPT-2 small, 6 layers
GPU_MLP = (8192, 4096)  # batch, width
GPU_CNN = (64, 128)  # batch, image side


def _mlp(device: str = "cpu", compiled: bool = False) -> Callable[[], object]:
    batch, width = (64, 1024) if device == "cpu" else GPU_MLP
    model = nn.Sequential(
        nn.Linear(512, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10),
    ).to(device)
    x = torch.randn(batch, 512, device=device)
    run = torch.compile(model) if compiled else model
    return lambda: run(x)


def _cnn(device: str = "cpu", compiled: bool = False) -> Callable[[], object]:
    batch, side = (8, 64) if device == "cpu" else GPU_CNN
    model = SmallCNN().to(device)
    x = torch.randn(batch, 3, side, side, device=device)
    run = torch.compile(model) if compiled else model
    return lambda: run(x)


def _gpt_inputs(cfg: GPTConfig, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq)).to(device)
    targets = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq)).to(device)
    return idx, targets


def _transformer(device: str = "cpu", compiled: bool = False) -> Callable[[], object]:
    cfg = GPTConfig() if device == "cpu" else GPU_GPT
    model = GPT(cfg).to(device)
    idx, _ = _gpt_inputs(cfg, device)
    run = torch.compile(model) if compiled else model
    return lambda: run(idx)


def _train_step(device: str = "cpu", compiled: bool = False) -> Callable[[], object]:
    cfg = GPTConfig() if device == "cpu" else GPU_GPT
    model = GPT(cfg).to(device)
    idx, targets = _gpt_inputs(cfg, device)
    # foreach=False: the per-parameter loop that AdamW runs on CPU by default anyway, stated
    # explicitly; on CUDA AdamW's default, foreach.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=None if device != "cpu" else False)
    run = torch.compile(model) if compiled else model  # forward and backward compiled; the optimizer eager

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        logits = run(idx)
        loss = F.cross_entropy(logits.view(-1, cfg.vocab), targets.view(-1))
        loss.backward()
        opt.step()
        return loss

    return step


def _hf_gpt2(device: str = "cpu", compiled: bool = False) -> Callable[[], object]:
    from transformers import GPT2Config, GPT2LMHeadModel

    if device == "cpu":
        config, batch, seq = GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1024, n_positions=128), 4, 128
    else:
        config, batch, seq = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=512), 8, 512
    model = GPT2LMHeadModel(config).to(device).eval()
    ids = torch.randint(0, config.vocab_size, (batch, seq)).to(device)
    run = torch.compile(model) if compiled else model

    def forward() -> object:
        with torch.no_grad():
            return run(input_ids=ids).logits

    return forward


def _hf_gpt2_host(device: str = "cpu", compiled: bool = False) -> Callable[[], object]:
    """GPT-2's op sequence at a size where every op is cheap, as it is to a GPU's host: the recorder's own
    per-op work, measured on CPU (bench/record_ab.py)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=6, n_embd=64, n_head=4, vocab_size=1024, n_positions=64)
    model = GPT2LMHeadModel(config).to(device).eval()
    ids = torch.randint(0, config.vocab_size, (1, 8)).to(device)
    run = torch.compile(model) if compiled else model

    def forward() -> object:
        with torch.no_grad():
            return run(input_ids=ids).logits

    return forward


_FACTORIES: dict[str, Callable[..., Callable[[], object]]] = {
    "mlp": _mlp,
    "cnn": _cnn,
    "transformer": _transformer,
    "train_step": _train_step,
    "hf_gpt2": _hf_gpt2,
    "hf_gpt2_host": _hf_gpt2_host,
}

DESCRIPTIONS = {
    "mlp": "MLP forward: batch 64, 512-1024-1024-1024-10, ReLU",
    "cnn": "CNN forward: batch 8x3x64x64, 3x(conv3x3-BN-ReLU-maxpool), avgpool, linear",
    "transformer": "GPT-2-style forward: 2 layers, d_model 256, 4 heads, seq 128, batch 4, vocab 1024",
    "train_step": "same transformer: forward + cross-entropy + backward + AdamW step",
    "hf_gpt2": "HF GPT-2 forward, no_grad: 2 layers, width 256, batch 4x128, vocab 1024",
    "hf_gpt2_host": "HF GPT-2 forward, no_grad: 6 layers, width 64, batch 1x8 (ops as cheap as a GPU host's)",
}


def available(name: str) -> bool:
    """Whether workload `name` can be built here (hf_gpt2 needs transformers: `pip install -e .[bench]`)."""
    if not name.startswith("hf_gpt2"):
        return True
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def make(name: str, seed: int = 0, device: str = "cpu", compiled: bool = False) -> Callable[[], object]:
    """Build workload `name` (seeded: same model and inputs every time); GPU sizes off the CPU;
    `compiled`: the model goes through torch.compile (inductor), compiled at its first call."""
    if name not in _FACTORIES:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(NAMES)}")
    torch.manual_seed(seed)
    return _FACTORIES[name](device, compiled)


def parameter_count(name: str) -> int | None:
    """Parameters of the workload's model (for the table's description)."""
    if name == "mlp":
        return sum(a * b + b for a, b in [(512, 1024), (1024, 1024), (1024, 1024), (1024, 10)])
    if name in ("transformer", "train_step"):
        return sum(p.numel() for p in GPT(GPTConfig()).parameters())
    if name == "cnn":
        return sum(p.numel() for p in SmallCNN().parameters())
    if name == "hf_gpt2" and available(name):
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1024, n_positions=128)
        return sum(p.numel() for p in GPT2LMHeadModel(config).parameters())
    return None

