"""rdma_fork: the rare RDMA fork bug of large training jobs, made to happen on demand.

Each host runs a training process whose address space is modelled at page granularity (memory):
glibc's arenas and their metadata, the C environ array, large Python objects, and RDMA-registered
buffers. With fork safety, a registration rounds out to whole pages and marks them
``MADV_DONTFORK``; a 4-byte flush buffer inside a malloc'd communicator struct so takes the whole
page of the struct — and whatever allocator metadata or data shares it — out of every forked
child. Periodic subprocess launches (process) then fail on the few hosts where that page mattered:
SIGSEGV in glibc's fork handler, or ``OSError: [Errno 14] Bad address`` from execve. Where
allocations land is a choice, so which hosts fail is drawn from the seed. See
docs/scenarios/rdma_fork.md.

Modules: memory (the address space), params (config), process (start-up and launches), scenario.
"""

from timetravel.scenarios.rdma_fork.scenario import SCENARIO

__all__ = ["SCENARIO"]
