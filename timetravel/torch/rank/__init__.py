"""The rank child process: what runs inside each forked rank beside the user's script.

The zygote (:mod:`.zygote`) imports torch once and forks every rank; :mod:`.main` is a rank's life
from the fork to ``os._exit``; :mod:`.channel` is its one connection to the coordinator;
:mod:`.backend` and :mod:`.store_client` are the torch.distributed backend and store it installs
(:mod:`.setup`); :mod:`.env` is the simulated environment (time, entropy, CUDA, files).

Nothing here imports the coordinator (:mod:`timetravel.torch.world`); both speak
:mod:`timetravel.torch.protocol` (tests/test_layers.py checks it).
"""
