"""A nanoGPT-style character language model trained with DDP on text this script writes itself.

    torchrun --standalone --nproc-per-node 2 docs/examples/torch/tiny_gpt.py --steps 20
    timetravel torchrun --nproc-per-node 2 docs/examples/torch/tiny_gpt.py --steps 20

No downloads: the corpus is generated from a small grammar with a seeded generator. Each rank reads its
own shard of batches (DistributedSampler-style striding), AdamW with warm-up and cosine decay, gradient
clipping, and a loss averaged across ranks for logging. Planted bugs (--bug):
``broadcast_loss`` — rank 0 broadcasts its loss where the others all_reduce (a collective mismatch);
``lr_per_rank`` — each rank warms up over a different number of steps (the replicas drift apart).
"""

import argparse
import math
import random

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

WORDS = "the a one every small large red green model rank gradient step loss reduces grows trains on".split()


def corpus(characters: int) -> str:
    rng = random.Random(1234)
    text = []
    while sum(map(len, text)) < characters:
        text.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + ". ")
    return "".join(text)[:characters]


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(width)
        self.attention = torch.nn.Linear(width, 3 * width)
        self.projection = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.attention(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.projection(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class TinyGPT(torch.nn.Module):
    def __init__(
        self, vocabulary: int, context: int, width: int = 64, heads: int = 4, layers: int = 2
    ) -> None:
        super().__init__()
        self.token = torch.nn.Embedding(vocabulary, width)
        self.position = torch.nn.Embedding(context, width)
        self.blocks = torch.nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocabulary, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.token(tokens) + self.position(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def learning_rate(step: int, steps: int, warmup: int, peak: float = 3e-3) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--width", type=int, default=64, help="embedding width (160 and 4 layers: 1.2M parameters)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (smaller: more all_reduces)")
    parser.add_argument("--bug", choices=("none", "broadcast_loss", "lr_per_rank"), default="none")
    args = parser.parse_args()
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    text = corpus(20_000)
    alphabet = sorted(set(text))
    data = torch.tensor([alphabet.index(character) for character in text], dtype=torch.long)
    torch.manual_seed(0)
    model = DistributedDataParallel(
        TinyGPT(len(alphabet), args.context, width=args.width, layers=args.layers), bucket_cap_mb=args.bucket_mb
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    sampler = torch.Generator().manual_seed(42)
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - args.context - 1, (args.batch * world,), generator=sampler)[
            rank::world
        ]
        inputs = torch.stack([data[start : start + args.context] for start in starts])
        targets = torch.stack([data[start + 1 : start + args.context + 1] for start in starts])
        warmup = 5 + (rank if args.bug == "lr_per_rank" else 0)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps, warmup)
        loss = F.cross_entropy(model(inputs).view(-1, len(alphabet)), targets.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        logged = loss.detach().clone()
        if args.bug == "broadcast_loss" and rank == 0:
            dist.broadcast(logged, src=0)
        else:
            dist.all_reduce(logged)
            logged /= world
        if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"step {step} loss {logged.item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
