"""Named limits of the torch runtime (TIGER_STYLE: every queue, message and wait is bounded).

Each limit says why it has the value it has. Units come last in every name.
"""

from __future__ import annotations

MESSAGE_BYTES_MAX = 1 << 31
"""One message between a rank and the coordinator: 2 GiB, the largest tensor set one collective may
carry (a 500M-parameter fp32 bucket). Checked from the length prefix, before anything is read."""

MESSAGE_HEADER_BYTES = 8
"""A message starts with two 4-byte little-endian counts: the bytes of its msgpack skeleton and the
number of out-of-band frames that follow it (timetravel/torch/protocol/wire.py)."""

FRAMES_MAX = 65_536
"""Out-of-band frames (tensors' bytes) in one message: a state message carries about four per
parameter tensor (the tensor, its gradient, two Adam moments), so this admits a model of 16,000
parameter tensors; the frame-size table a count announces is at most 256 KiB, read before the body."""

FRAME_BYTES_MIN = 4096
"""A tensor's bytes travel out of band from this size on: below it, copying them into the msgpack
skeleton costs less than a frame's bookkeeping (an entry in the size table, a buffer to send)."""

FRAME_ALIGN_BYTES = 64
"""Each frame starts at a multiple of this offset in the receiver's buffer (which numpy allocates at
least 16-byte aligned), so that the arrays read over it in place are aligned for every dtype."""

NPROC_MAX = 1024
"""Ranks one run may start: each is a forked process of a few tens of MiB private memory."""

RANK_START_TIMEOUT_S = 120.0
"""Wall seconds for the zygote to start (it imports torch) and for a forked rank to say hello."""

STUCK_TIMEOUT_S_DEFAULT = 120.0
"""Wall seconds a rank may run without calling the World before it is reported ``stuck``. Rank code
between two collectives is the user's compute: generous, but a rank in an endless loop or a blocking
read must not hang the run for ever."""

FLIGHT_RECORDER_ENTRIES = 16
"""Collectives kept per rank in the flight recorder (as NCCL's TORCH_NCCL_TRACE_BUFFER_SIZE)."""

OUTPUT_LINE_CHARS_MAX = 10_000
"""A rank's output line longer than this is cut (the rest is counted, not lost silently)."""

TRACEBACK_CHARS_MAX = 20_000
"""A rank's traceback kept in its failure record."""

SNAPSHOT_EVERY_EVENTS_TORCH = 192
"""A torch recording's snapshot interval: a seek from a rank checkpoint re-executes at most this
many events, each of which may run the user's code (a training step between two collectives).

Each snapshot point costs the recording every rank's training state and, once sought through, a
checkpoint set in memory (a forked copy of every rank, ~34 MB each for bench torch's 1.2M-parameter
model, and a World copy). At 96 events (~1 snapshot per optimizer step of that run, 41 points) the
default checkpoint budget held 23 sets, so random seeks re-executed several intervals (p95 1.57 s),
and recording cost 1.74x the run; at 192 every set fits the budget and a seek re-executes at most one
interval (p95 0.94 s measured quiet, docs/performance-history.md)."""

WORK_NS_MAX = 3_600 * 1_000_000_000
"""The most compute one interval between two calls may charge under ``compute_model=flops`` (an
hour): a larger ``work_ns`` from a rank is a malformed message, not a very slow step."""

COMPUTE_FLOPS_PER_S_DEFAULT = 400_000_000_000_000
"""400 TFLOP/s, ``compute_model=flops``'s default rate: an H100 SXM's dense bf16 peak (989 TFLOP/s)
at the ~40% model-FLOPs utilisation large data-parallel training reaches."""

BATCH_INDICES_MAX = 4096
"""Sampler indices kept per DataLoader batch message, and per rank and optimizer step in the World
(``nodes/rN/batch``): a batch of a few thousand samples is named in full; a larger one keeps its
first indices and counts the rest."""

STATE_BYTES_MAX_DEFAULT = 1 << 30
"""``state_bytes_max``'s default: a rank's training state of one step whose bytes a recording may keep
(1 GiB: AdamW's parameters and two moments of an 89M-parameter fp32 model). Above it a recording
keeps that step's digests only and says so in a note; the values are rebuilt by re-execution. Until
2026-12-06 it was 64 MiB, which left a 10M-parameter AdamW model (160 MB a step with its gradients)
with no stored state at all, and every command that read a tensor re-executed from the start."""

STATE_PULL_BYTES_MAX = 64 << 20
"""One state pull's reply (a rank's tensors of its latest state step, coordinator-bound): a step's
state above it crosses in several pulls (a tensor larger than it alone in one), so a message and the
coordinator's receive buffer stay bounded whatever the model's size."""

SNAPSHOT_ELIDE_BYTES_MIN = FRAME_BYTES_MIN
"""A torch recording's snapshots keep arrays of more bytes as page digests only (sim/elided.py): the
tensors ranks sent and the World reduced, and the training state the ranks describe, are rebuilt by
re-execution (a recording keeps the training state of some steps: torch/world/state_pull.py). A
loss all_reduce's one float stays whole, so metrics and small results read without re-execution."""
