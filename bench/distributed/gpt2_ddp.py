"""A real-model check of distributed runs (not a test fixture): Hugging Face GPT-2 built from a small
config (random weights, no download), trained with DDP (or FSDP2's `fully_shard` per block with
`--fsdp2`) and AdamW for two steps, batches from a DataLoader with a DistributedSampler, the step
compiled. Under `tracediff run --nproc-per-node 2` a clean run should match on every rank and its
replicas stay in sync.

Run: tracediff run bench/distributed/gpt2_ddp.py --backends eager,inductor --nproc-per-node 2 [-- --device cuda] [--fsdp2]
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel


def train_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--fsdp2", action="store_true", help="shard with FSDP2 instead of DDP")
    options = parser.parse_args()
    rank = int(os.environ["RANK"])
    dist.init_process_group("nccl" if options.device == "cuda" else "gloo")
    device = torch.device("cuda", rank) if options.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=512, n_positions=64,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model: torch.nn.Module = GPT2LMHeadModel(config).to(device)
    if options.fsdp2:
        for block in model.transformer.h:
            fully_shard(block)
        fully_shard(model)
    else:
        model = DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randint(0, 512, (16, 32), generator=torch.Generator().manual_seed(1)))
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, shuffle=False))
    step = torch.compile(train_loss)
    for i, (ids,) in zip(range(options.steps), loader):
        loss = step(model, ids.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {i}: loss {loss.item():.4f}")
    del step, opt, model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
