"""A language model whose head shares the embedding's weight (lm_head.weight is wte.weight), under DDP:
state_dict() names the tensor twice, and so must the state the simulator records."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class TinyLanguageModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(10, 4)
        self.lm_head = torch.nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.wte(tokens))


dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(TinyLanguageModel())
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
for _ in range(2):
    tokens = torch.randint(0, 10, (3,))
    loss = torch.nn.functional.cross_entropy(model(tokens), tokens)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("state_dict", sorted(model.module.state_dict()), flush=True)
