"""A script that never calls a collective or an optimizer step (a GPU script's no-GPU branch, or one
that forgot to wrap its model): it passes, and the run says it never was distributed."""

import torch

print("trained nothing", torch.ones(2).sum().item(), flush=True)
