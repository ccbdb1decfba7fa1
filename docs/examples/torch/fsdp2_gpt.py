"""FSDP2: the tiny GPT of tiny_gpt.py built on the meta device, sharded with fully_shard, trained with AdamW.

    torchrun --standalone --nproc-per-node 2 docs/examples/torch/fsdp2_gpt.py --steps 10
    timetravel torchrun --nproc-per-node 2 docs/examples/torch/fsdp2_gpt.py --steps 10

The model is created on ``meta`` (no memory), each block and the root are wrapped with ``fully_shard``,
then ``to_empty`` allocates the shards and every module's parameters are initialised again.
Planted bug (--bug forget_layernorm): the re-initialisation skips LayerNorm, so those parameters keep
whatever ``to_empty`` left in memory — a real bug class of public FSDP examples. Under timetravel
uninitialised memory is NaN (deterministic algorithms fill it), so the first collective a rank feeds
names the rank and the collective; on a GPU it is garbage that may train "fine" for a while.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tiny_gpt import TinyGPT, corpus
from torch.distributed.fsdp import fully_shard


def initialise(module: torch.nn.Module, forget_layernorm: bool) -> None:
    if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
        torch.nn.init.normal_(module.weight, std=0.02)
        if getattr(module, "bias", None) is not None:
            torch.nn.init.zeros_(module.bias)
    elif isinstance(module, torch.nn.LayerNorm) and not forget_layernorm:
        module.reset_parameters()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--bug", choices=("none", "forget_layernorm"), default="none")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    text = corpus(20_000)
    alphabet = sorted(set(text))
    data = torch.tensor([alphabet.index(character) for character in text], dtype=torch.long)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = TinyGPT(len(alphabet), 32)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.apply(lambda module: initialise(module, args.bug == "forget_layernorm"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sampler = torch.Generator().manual_seed(42)
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - 33, (8 * world,), generator=sampler)[rank::world]
        inputs = torch.stack([data[start : start + 32] for start in starts])
        targets = torch.stack([data[start + 1 : start + 33] for start in starts])
        loss = F.cross_entropy(model(inputs).view(-1, len(alphabet)), targets.view(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        if rank == 0:
            print(f"step {step} loss {logged.item() / world:.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
