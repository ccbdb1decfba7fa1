"""Each rank reads unseeded randomness (torch's default generator): real torchrun seeds it from the OS,
the simulator from (seed, rank), so the two runs differ from the first step on."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.seed()  # from here on the default generator is seeded from the OS, as an unseeded script's is
for step in range(3):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
    optimizer.step()
    print(f"step {step} loss {loss.item()}")
dist.destroy_process_group()
