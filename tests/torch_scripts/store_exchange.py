"""Ranks exchange their addresses through the default store, as a rendezvous does; checks every op."""

import datetime
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = dist.distributed_c10d._get_default_store()
store.set(f"address/{rank}", f"host{rank}")
peers = [store.get(f"address/{peer}").decode() for peer in range(world)]  # waits for the later ranks
assert peers == [f"host{peer}" for peer in range(world)], peers
store.add("arrived", 1)
store.wait([f"address/{peer}" for peer in range(world)])
assert store.check(["address/0"]) and not store.check(["nobody"])
if rank == 0:
    assert store.compare_set("leader", "", "r0") == b"r0"
dist.barrier()
assert store.compare_set("leader", "", f"r{rank}") == b"r0"  # taken: the current value comes back
assert store.add("arrived", 0) == world
assert store.compare_set(f"absent/{rank}", "x", "y") == b"x" and not store.check([f"absent/{rank}"])
dist.barrier()
underlying = store.underlying_store  # torch's PrefixStore cannot forward these two to a Python store
if rank == 0:
    underlying.set("plain", "1")
    assert (
        underlying.num_keys() >= 1 and underlying.delete_key("plain") and not underlying.delete_key("plain")
    )
dist.barrier()
assert not underlying.check(["plain"])
if len(sys.argv) > 1 and sys.argv[1] == "timeout" and rank == 1:
    store.wait(["never_set"], datetime.timedelta(seconds=2))
if len(sys.argv) > 1 and sys.argv[1] == "get_missing" and rank == 1:
    store.get("never_set")  # the default store's timeout: the group's (gloo: 30 minutes)
print(f"rank {rank} saw {peers}")
