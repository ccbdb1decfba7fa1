"""The coordinator: the process that holds the World and drives the rank processes.

The torch scenario (:mod:`.scenario`) and its nodes — the ranks (:mod:`.ranks`), the simulated
backend as plain data (:mod:`.c10d`, with :mod:`.collectives`, :mod:`.timing`, :mod:`.digests`,
:mod:`.hangs`, :mod:`.faults`, :mod:`.elastic`, :mod:`.resume`) and the rendezvous store
(:mod:`.store`) — and the one small interface to the live processes (:mod:`.host`,
:mod:`.driver`), their fork checkpoints (:mod:`.checkpoints`) and the world source of a torch
Session (:mod:`.world_source`).

Nothing here imports the rank side (:mod:`timetravel.torch.rank`); both speak
:mod:`timetravel.torch.protocol` (tests/test_layers.py checks it).
"""
