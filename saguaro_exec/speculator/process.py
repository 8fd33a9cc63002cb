"""The SSD draft process: loads the draft model and serves every batch of a run over point-to-point.

Started by ``link.ProcessLink`` through ``draft_entry`` (a fresh interpreter: no re-import of the
caller's main module), which makes it die with its parent. Any exception's traceback goes to
ERR_FILE before it exits non-zero.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from saguaro_exec.faults import apply_fault, parse_fault
from saguaro_exec.sampling import make_generator
from saguaro_exec.speculator.cache import max_branches
from saguaro_exec.speculator.protocol import cache_q, cache_tensor, reply_tensor, unpack_outcome
from saguaro_exec.speculator.worker import DraftWorker, WorkerSpec

TAG = 0
TAG_Q = 1          # q rows at temperature > 0: their own tag, so both receives can be posted early
TAG_CACHE, TAG_CACHE_Q = 2, 3   # push protocol: the speculation cache (and its q rows)


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
    fault: str | None = None       # test-only fault injection (faults.parse_fault)
    protocol: str = "reply"        # "reply": answer each outcome | "push": send each built cache (messages.py)


def load_source(source: object, device: str, dtype: str):
    """A Transformer from a checkpoint path or an in-memory model, on ``device``."""
    from saguaro_exec.model import load_model

    dt = getattr(torch, dtype)
    if isinstance(source, str | os.PathLike):
        return load_model(source, device=device, dtype=dt)
    return source.to(device=device, dtype=dt).eval()


def connect(port: int, rank: int, timeout_s: float, store: dist.Store | None = None) -> dist.ProcessGroup:
    """A two-rank gloo group over a TCP store on 127.0.0.1:port (rank 0 hosts the store)."""
    timeout = timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, 2, False, timeout=timeout)
        store.set("draft_up", "1")               # lets the parent stop watching for a failed start
    return dist.ProcessGroupGloo(store, rank, 2, timeout)


def draft_main(args: DraftArgs, port: int, err_file: str) -> None:
    """Process body: connect, load, then per batch: start, and (build, answer) per round."""
    try:
        torch.set_num_threads(max(1, args.threads))
        pg = connect(port, 1, args.timeout_s)
        model = load_source(args.source, args.device, args.dtype)
        pg.send([torch.ones(1)], 0, TAG).wait()                      # ready
        fault, n_sent, vocab = parse_fault(args.fault), 0, model.config.vocab_size
        for bi, prompts in enumerate(args.batches):
            gen = make_generator(args.seed + 7919 * (bi + 1), args.device)
            worker = DraftWorker(model, prompts, args.ws, gen, args.t_start)
            pending = _send(pg, apply_fault(fault, n_sent, worker.start(), vocab))
            n_sent += 1
            outcome = torch.zeros(len(prompts), 4, dtype=torch.long)
            if args.protocol == "push":
                n_sent = _serve_push(pg, worker, args, fault, n_sent, vocab, pending, outcome)
                continue
            while True:
                worker.build()                       # overlaps the verifier's verification
                for work, _ in pending:              # gloo completes a send only once the peer
                    work.wait()                      # progresses, so never block on it before building
                pg.recv([outcome], 0, TAG).wait()    # (posting this before the build delays the reply's
                                                     # delivery until the build ends: measured)
                acc, bonus, done, stop = unpack_outcome(outcome)
                pending = _send(pg, apply_fault(fault, n_sent, worker.answer(acc, bonus, done), vocab))
                n_sent += 1
                if stop:
                    for work, _ in pending:
                        work.wait()
                    break
    except BaseException:
        with open(err_file, "w") as f:
            f.write(traceback.format_exc())
        sys.exit(1)


def cache_dims(ws: WorkerSpec, vocab: int) -> tuple[int, int]:
    """(n_max, r_max): most branches and widest ranked list a cache message can carry."""
    n_max = max_branches(ws.fanout, ws.fanout_miss)
    return n_max, min(vocab, max(ws.n_rank, max(ws.fanout), max(ws.fanout_miss)) + 1)


def _serve_push(pg: dist.ProcessGroup, worker: DraftWorker, args: DraftArgs, fault, n_sent: int, vocab: int,
                pending: list, outcome: torch.Tensor) -> int:
    """One batch of the push protocol: per round build, send the cache, read the outcome, and send a
    speculation only for rows that missed (the verifier looks hits up in the cache it already holds)."""
    k = args.ws.k
    n_max, r_max = cache_dims(args.ws, vocab)
    while True:
        worker.build()
        cache = apply_fault(fault, n_sent, worker.cache, vocab)
        n_sent += 1
        msgs = [(cache_tensor(cache, k, n_max, r_max, worker.times), TAG_CACHE)]
        if cache.q is not None:
            msgs.append((cache_q(cache.q, n_max), TAG_CACHE_Q))
        for work, _ in pending:
            work.wait()
        pending = [(pg.send([m], 0, tag), m) for m, tag in msgs]
        pg.recv([outcome], 0, TAG).wait()
        acc, bonus, done, stop = unpack_outcome(outcome)
        reply = worker.answer(acc, bonus, done)
        if bool(reply.from_backup.any()):             # a live row missed: its backup speculation
            pending += _send(pg, apply_fault(fault, n_sent, reply, vocab))
            n_sent += 1
        if stop:
            for work, _ in pending:
                work.wait()
            return n_sent


def _send(pg: dist.ProcessGroup, reply) -> list:
    """Post the reply (header, then q rows at temperature > 0) without waiting; returns (work, tensor)
    pairs, the tensors kept alive until their sends complete."""
    msgs = [reply_tensor(reply)]
    if reply.q is not None:
        msgs.append(reply.q.detach().to("cpu", torch.float32).contiguous())
    return [(pg.send([m], 0, tag), m) for m, tag in zip(msgs, (TAG, TAG_Q))]


def main(argv: list[str]) -> None:
    """Arguments after the parent pid: PORT ARGS_FILE ERR_FILE (see ``draft_entry``)."""
    port, args_file, err_file = int(argv[1]), argv[2], argv[3]
    args = torch.load(args_file, weights_only=False)   # written by our own parent process just now
    draft_main(args, port, err_file)
