"""What the tensor-parallel ranks share: their arguments, the process group, and the command protocol.

Rank 0 (the verifier's process) drives; ranks 1..N-1 (``tp_worker``) follow. Every command starts with a
broadcast int64 header of HEADER slots: (op, cache id, batch, T or capacity, S or live count, ...).
FORWARD then broadcasts the step inputs (int64 [3, B, T]: tokens, positions, slots; uint8 mask [B, T, S])
and all ranks run the same sharded forward; NEW_CACHE broadcasts the ids of caches rank 0 still holds,
so a worker frees the others; STOP ends the workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

HEADER = 8
OP_STOP, OP_FORWARD, OP_NEW_CACHE = 0, 1, 2
# Rank 0's bound on one gloo collective. Rank 0 only ever waits for workers doing the same step (a
# broadcast's data leaves once the worker has posted its receive, an all_reduce waits for its partner
# layer), so a longer wait means a lost worker. gloo can miss a worker's death: a send issued as the
# peer's connection closes is never woken (the pair closed before the send registered) and waits out
# its whole timeout, as it did for 600 s in CI (session 32). Workers keep ``timeout_s``: they wait idle
# for rank 0's next command.
RANK0_OP_S = 30.0


@dataclass
class TPArgs:
    """Everything a TP worker needs (sent to it as JSON, the source then a checkpoint directory)."""

    source: object                 # checkpoint path (str) or, on rank 0, an in-memory Transformer
    devices: list[str]             # one per rank; rank r runs on devices[r]
    dtype: str
    threads: int
    timeout_s: float
    fault: int | None = None       # test-only: rank 1 raises (or hangs) at its fault-th forward (0-based)
    fault_kind: str = "raise"      # test-only: "raise" | "hang" (alive, never answers: a deadlocked worker)
    start_timeout_s: float | None = None   # rank 0's bound on the workers' start-up (None: timeout_s)


def backend(devices: list[str]) -> str:
    """gloo for CPU ranks, nccl for CUDA ranks."""
    return "nccl" if devices[0].startswith("cuda") else "gloo"


def op_timeout_s(rank: int, timeout_s: float) -> float:
    """This rank's bound on one gloo op: RANK0_OP_S on rank 0 (at most ``timeout_s``), ``timeout_s`` elsewhere."""
    return min(timeout_s, RANK0_OP_S) if rank == 0 else timeout_s


def make_group(store: dist.Store, rank: int, devices: list[str], timeout_s: float) -> dist.ProcessGroup:
    """The N-rank group over ``store``: ProcessGroupGloo on CPU (rank 0's ops bounded by RANK0_OP_S),
    ProcessGroupNCCL on CUDA (this rank's device made current first)."""
    timeout = timedelta(seconds=timeout_s)
    world = len(devices)
    if backend(devices) == "gloo":
        return dist.ProcessGroupGloo(store, rank, world, timedelta(seconds=op_timeout_s(rank, timeout_s)))
    torch.cuda.set_device(torch.device(devices[rank]))
    opts = dist.ProcessGroupNCCL.Options()
    opts._timeout = timeout
    return dist.ProcessGroupNCCL(store, rank, world, opts)


def bcast(group: dist.ProcessGroup, t: torch.Tensor) -> torch.Tensor:
    """Broadcast ``t`` from rank 0 in place (and wait); returns it."""
    group.broadcast([t], dist.BroadcastOptions()).wait()
    return t


def header(*values: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """A command header: the values, zero-padded to HEADER slots."""
    h = torch.zeros(HEADER, dtype=torch.long, device=device)
    h[: len(values)] = torch.tensor(values, dtype=torch.long)
    return h
