"""The SSD draft process: loads the draft model and serves every batch of a run over point-to-point.

Started by ``link.ProcessLink`` as ``python -m saguaro_exec.draft_entry PORT ARGS_FILE ERR_FILE``
(a fresh interpreter: no re-import of the caller's main module). It dies with its parent
(PR_SET_PDEATHSIG on Linux) and writes any exception's traceback to ERR_FILE before exiting non-zero.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .draft_worker import DraftWorker, WorkerSpec
from .messages import reply_tensor, unpack_outcome
from .sampling import make_generator

TAG = 0


@dataclass
class DraftArgs:
    """Everything the draft process needs (picklable)."""

    source: object                 # checkpoint path (str) or an in-memory Transformer
    device: str
    dtype: str
    batches: list[list[list[int]]]
    ws: WorkerSpec
    seed: int
    t_start: float
    threads: int
    timeout_s: float


def load_source(source: object, device: str, dtype: str):
    """A Transformer from a checkpoint path or an in-memory model, on ``device``."""
    from .model import load_model

    dt = getattr(torch, dtype)
    if isinstance(source, str | os.PathLike):
        return load_model(source, device=device, dtype=dt)
    return source.to(device=device, dtype=dt).eval()


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def connect(port: int, rank: int, timeout_s: float, store: dist.Store | None = None) -> dist.ProcessGroup:
    """A two-rank gloo group over a TCP store on 127.0.0.1:port (rank 0 hosts the store)."""
    timeout = timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, 2, False, timeout=timeout)
    return dist.ProcessGroupGloo(store, rank, 2, timeout)


def draft_main(args: DraftArgs, port: int, err_file: str) -> None:
    """Process body: connect, load, then per batch: start, and (build, answer) per round."""
    try:
        torch.set_num_threads(max(1, args.threads))
        pg = connect(port, 1, args.timeout_s)
        model = load_source(args.source, args.device, args.dtype)
        pg.send([torch.ones(1)], 0, TAG).wait()                      # ready
        for bi, prompts in enumerate(args.batches):
            gen = make_generator(args.seed + 7919 * (bi + 1), args.device)
            worker = DraftWorker(model, prompts, args.ws, gen, args.t_start)
            _send(pg, worker.start())
            outcome = torch.zeros(len(prompts), 4, dtype=torch.long)
            while True:
                worker.build()
                pg.recv([outcome], 0, TAG).wait()
                acc, bonus, done, stop = unpack_outcome(outcome)
                _send(pg, worker.answer(acc, bonus, done))
                if stop:
                    break
    except BaseException:
        with open(err_file, "w") as f:
            f.write(traceback.format_exc())
        sys.exit(1)


def _send(pg: dist.ProcessGroup, reply) -> None:
    pg.send([reply_tensor(reply)], 0, TAG).wait()
    if reply.q is not None:
        pg.send([reply.q.detach().to("cpu", torch.float32).contiguous()], 0, TAG).wait()


def main(argv: list[str]) -> None:
    """``python -m saguaro_exec.draft_entry PORT ARGS_FILE ERR_FILE``."""
    _die_with_parent()
    port, args_file, err_file = int(argv[1]), argv[2], argv[3]
    args = torch.load(args_file, weights_only=False)   # written by our own parent process just now
    draft_main(args, port, err_file)
