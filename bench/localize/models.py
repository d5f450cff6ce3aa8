"""The programs faults are planted in: small models of our own and library models.

Each builder returns a zero-argument function that runs one unit of work
through `torch.compile` and returns the tensors a user would look at (the
outputs of a forward; the loss, gradients and updated weights of a training step).
Library models come from a config with random weights: no downloads.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

Work = Callable[[], list[torch.Tensor]]

OWN = ("mlp", "cnn", "train_mlp")
LIBRARY = ("gpt2", "llama", "bert", "train_gpt2", "train_gpt2_foreach", "deberta", "swin", "wav2vec2", "train_bart",
           "gemma2", "train_mistral")
NAMES = OWN + LIBRARY
TRAINING = ("train_mlp", "train_gpt2", "train_gpt2_foreach", "train_bart", "train_mistral")
# A training model's unit of work is this many AdamW steps: from the second on, every compiled call reads
# parameters AdamW moved by rounding, as in a real training run (issue 47).
TRAIN_STEPS = 3


def updated_by_optimizer(name: str, count: int) -> int:
    """How many of a model's `count` results (the last ones) the eager optimizer step computed rather than the
    compiled code: the updated weights of `_train`'s [loss, *gradients, *weights]; none for a forward."""
    return (count - 1) // 2 if name in TRAINING else 0


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)
        self.fc2 = nn.Linear(64, 64)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(x))
        h = self.norm(h)
        h = torch.tanh(self.fc2(h)) + h
        return F.log_softmax(self.head(h), dim=-1)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.max_pool2d(h, 2)
        h = F.silu(self.bn2(self.conv2(h)))
        h = h.mean(dim=(2, 3))
        return self.fc(h)


def _forward(model: nn.Module, *inputs: torch.Tensor, backend: object) -> Work:
    compiled = torch.compile(model, backend=backend)
    return _no_grad(lambda: compiled(*inputs))


def _logits(model: nn.Module, backend: object, **inputs: torch.Tensor) -> Work:
    """A library model's forward in eval mode, compiled: its logits."""
    compiled = torch.compile(model.eval(), backend=backend)
    return _no_grad(lambda: compiled(**inputs).logits)


def _no_grad(forward: Callable[[], torch.Tensor]) -> Work:
    def work() -> list[torch.Tensor]:
        with torch.no_grad():
            return [forward()]
    return work


def _train(model: nn.Module, loss_of: Callable[[nn.Module], torch.Tensor], backend: object,
           foreach: bool | None = None, steps: int = TRAIN_STEPS) -> Work:
    """`steps` AdamW steps with forward and backward compiled; the optimizer runs eagerly. `foreach`: AdamW's
    in-place `_foreach_*_` ops (CUDA's default), not its one-tensor ops (CPU's), on any device."""
    compiled = torch.compile(model, backend=backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=foreach)

    def work() -> list[torch.Tensor]:
        for _ in range(steps):
            optimizer.zero_grad()
            loss = loss_of(compiled)
            loss.backward()
            grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
            optimizer.step()
        # What a user watches, of the last step: the loss, the gradients (AdamW's first step is about
        # lr * sign(grad), which hides a 1% gradient error), the updated weights.
        return [loss.detach(), *grads, *(p.detach() for p in model.parameters())]
    return work


def _hf_tokens(device: str, vocab: int = 100, batch: int = 2, seq: int = 16) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), device=device)


def build(name: str, device: str, backend: object) -> Work:
    torch.manual_seed(0)
    if name == "mlp":
        return _forward(MLP().to(device).eval(), torch.randn(8, 32, device=device), backend=backend)
    if name == "cnn":
        return _forward(CNN().to(device).eval(), torch.randn(4, 3, 16, 16, device=device), backend=backend)
    if name == "train_mlp":
        model = MLP().to(device)
        x, y = torch.randn(8, 32, device=device), torch.randint(0, 10, (8,), device=device)
        return _train(model, lambda m: F.nll_loss(m(x), y), backend)
    import transformers

    if name in ("gpt2", "train_gpt2", "train_gpt2_foreach"):
        config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=32,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config).to(device)
    elif name == "llama":
        config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                          max_position_embeddings=32)
        model = transformers.LlamaForCausalLM(config).to(device)
    elif name == "bert":
        config = transformers.BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=2, vocab_size=100, max_position_embeddings=32)
        model = transformers.BertForMaskedLM(config).to(device)
    elif name in ("deberta", "swin", "wav2vec2", "train_bart", "gemma2", "train_mistral"):
        return _more_library_models(name, device, backend)
    else:
        raise SystemExit(f"unknown model {name!r}; known: {', '.join(NAMES)}")
    tokens = _hf_tokens(device)
    if name in ("train_gpt2", "train_gpt2_foreach"):
        return _train(model, lambda m: m(input_ids=tokens, labels=tokens).loss, backend,
                      foreach=True if name == "train_gpt2_foreach" else None)
    return _logits(model, backend, input_ids=tokens)


def _more_library_models(name: str, device: str, backend: object) -> Work:
    """DeBERTa-v2 (disentangled attention: relative positions gathered both ways), Swin (shifted windows:
    torch.roll and window partition views), wav2vec2 (convolutional feature encoder, group norm, a positional
    convolution under weight norm), BART trained (encoder-decoder with cross-attention), Gemma-2 (attention and
    final-logit soft-capping, alternating sliding-window layers) and Mistral trained (grouped-query attention with a
    sliding window shorter than the sequence)."""
    import transformers

    if name == "gemma2":
        model = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=100, max_position_embeddings=32, sliding_window=8, attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0, attn_implementation="eager")).to(device)
        return _logits(model, backend, input_ids=_hf_tokens(device))
    if name == "train_mistral":
        model = transformers.MistralForCausalLM(transformers.MistralConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=100, max_position_embeddings=32, sliding_window=8, attn_implementation="sdpa")).to(device)
        tokens = _hf_tokens(device)
        return _train(model, lambda m: m(input_ids=tokens, labels=tokens).loss, backend)

    if name == "deberta":
        model = transformers.DebertaV2ForSequenceClassification(transformers.DebertaV2Config(
            vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=32, relative_attention=True, position_buckets=8, pos_att_type=["c2p", "p2c"],
            num_labels=3)).to(device)
        return _logits(model, backend, input_ids=_hf_tokens(device))
    if name == "swin":
        model = transformers.SwinForImageClassification(transformers.SwinConfig(
            image_size=32, patch_size=2, num_channels=3, embed_dim=16, depths=[2, 2], num_heads=[2, 4],
            window_size=4, num_labels=5)).to(device)
        return _logits(model, backend, pixel_values=torch.randn(2, 3, 32, 32, device=device))
    if name == "wav2vec2":
        model = transformers.Wav2Vec2ForCTC(transformers.Wav2Vec2Config(
            vocab_size=12, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
            num_conv_pos_embedding_groups=4, feat_extract_norm="group")).to(device)
        return _logits(model, backend, input_values=torch.randn(2, 800, device=device))
    model = transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)).to(device)
    source, labels = _hf_tokens(device), _hf_tokens(device, seq=8)
    return _train(model, lambda m: m(input_ids=source, labels=labels).loss, backend)
