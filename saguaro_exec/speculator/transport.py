"""Which transport carries the SSD messages between the verifier and its draft process, and how each side
opens it: a two-rank gloo group (any placement) or, on one host, the shared-memory hand-off (shm.py),
which needs no I/O thread and no socket wake-up on either side. Both are driven through the same
``send``/``recv``/``wait`` calls, so the protocol loops are one code path.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch.distributed as dist

from saguaro_exec.speculator.cache_message import CacheLayout
from saguaro_exec.speculator.protocol import connect, reply_width
from saguaro_exec.speculator.shm import ShmChannel, supported
from saguaro_exec.speculator.shm_group import ShmGroup

SLOTS = 4            # messages in flight per direction: a round's cache, its q rows, a reply and its q rows


def resolve_transport(transport: str, devices: list[str]) -> str:
    """auto -> shm when every model runs on the CPU of this host and the platform has the hand-off, else
    gloo (between devices the messages stay gloo/NCCL point-to-point)."""
    if transport != "auto":
        return transport
    return "shm" if supported() and all(d == "cpu" for d in devices) else "gloo"


def message_bytes(ws, vocab: int, bsz: int) -> tuple[int, int]:
    """(largest verifier -> draft message, largest draft -> verifier message) in bytes at batch size bsz."""
    layout = CacheLayout.of(ws, vocab)
    rows, width = layout.shape(bsz)
    back = [(bsz + 1) * reply_width(ws.k) * 8, rows * width * 8]
    if ws.temperature > 0:
        back += [bsz * ws.k * vocab * 4, bsz * layout.n_max * ws.k * vocab * 4]
    return bsz * 4 * 8, max(back)


def open_channel(ws, vocab: int, batches: list, alive: Callable[[], bool]) -> ShmChannel:
    """The verifier's end, sized for the largest batch; its ``fd`` goes to the draft at spawn."""
    bsz = max((len(b) for b in batches), default=1)
    return ShmChannel.create(message_bytes(ws, vocab, bsz), SLOTS, alive=alive)


def draft_group(transport: str, fd: int | None, port: int, rank: int, timeout_s: float, store: dist.Store):
    """The draft's end: the inherited channel (its parent's liveness checked while waiting) or gloo."""
    if transport == "shm":
        parent = os.getppid()
        return ShmGroup(ShmChannel.attach(fd, alive=lambda: os.getppid() == parent), timeout_s)
    return connect(port, rank, timeout_s, store=store)
