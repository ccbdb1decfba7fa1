"""dp_training: data-parallel training of a toy MLP on many simulated GPUs.

Each rank holds a replica of the model and a shard of a synthetic dataset; every step it computes
a gradient bucket, all-reduces it with its peers over real chunked message exchanges (ring, tree
or a parameter server), guards and applies the update. Detectors turn the failures of real
training jobs (a silent NaN, diverging replicas, a hang, mismatched collectives, a loss blow-up, a
departure from the fault-free trajectory) into structured failures. See docs/scenarios/dp_training.md.

Modules, bottom up: numerics (fixed-order maths), model, data, optimizer, device (the step's
kernels on the fabric's GPU streams), reliability (checksums, the sent log, resend requests),
collective (shared message bookkeeping), ring / tree / naive (the algorithms), allreduce
(dispatch), resend (answering resend requests), watchdog (retransmission timer and hang
suspicion), update (the guarded step, shared with the oracle), detectors, elastic (crash hooks,
controller, checkpoint storage), pipeline (one step), monitor (cross-rank detectors and the
flight recorder), reference (the oracle's fault-free trajectory), params, build, scenario, and
demo (what makes a demo seed, and the search for one).
"""

from timetravel.scenarios.dp_training.scenario import SCENARIO

__all__ = ["SCENARIO"]
