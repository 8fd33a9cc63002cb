"""The SSD draft process: loads the draft model and serves every batch of a run over point-to-point.

Started by ``links.ProcessLink`` through ``spawn.Supervisor`` (``serve`` is its target): a fresh
interpreter that dies with its parent; an exception's traceback reaches the verifier through the
error file ``spawn.child_main`` writes.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from saguaro_exec.faults import apply_fault, apply_start_fault, parse_fault
from saguaro_exec.sampling import batch_generator
from saguaro_exec.spawn import ARGS, join, report
from saguaro_exec.speculator.protocol import (
    TAG,
    TAG_CACHE,
    TAG_CACHE_Q,
    TAG_Q,
    OutcomeMessage,
    reply_tensor,
)
from saguaro_exec.speculator.transport import draft_group
from saguaro_exec.speculator.worker import DraftWorker, WorkerSpec


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
    protocol: str = "reply"        # "reply": answer each outcome | "push": send each built cache (protocol.py)
    transport: str = "gloo"        # "gloo" | "shm" (transport.py); shm_fd: the inherited channel
    shm_fd: int | None = None
    width: int | None = None       # rows per batch, refilled from the batch's prompts (None: one per prompt)
    start_timeout_s: float | None = None   # the parent's bound on this process's start-up (None: timeout_s)
    first_rows: int | None = None  # load mode: requests with a row at the start (those arriving at t = 0)


def load_source(source: object, device: str, dtype: str):
    """A Transformer from a checkpoint path (warmed up: model/warm.py) or an in-memory model (used as the caller
    gave it: its forwards are the caller's code, run only inside the run), on ``device``."""
    from saguaro_exec.model import load_model
    from saguaro_exec.model.warm import warm_up

    dt = getattr(torch, dtype)
    if isinstance(source, str | os.PathLike):
        model = load_model(source, device=device, dtype=dt)
        warm_up(model)
        return model
    return source.to(device=device, dtype=dt).eval()


def serve(rank: int, port: int, workdir: str) -> None:
    """The draft process's body (``spawn`` target): read the args its parent wrote, then ``draft_main``."""
    args = torch.load(os.path.join(workdir, ARGS), weights_only=False)   # written by our own parent just now
    draft_main(args, rank, port)


def draft_main(args: DraftArgs, rank: int, port: int) -> None:
    """Connect (store key ``up``), load the model (``ready``), then per batch: start, and (build, answer)
    per round."""
    torch.set_num_threads(max(1, args.threads))
    try:                                   # no inter-op pool beside the loop (nothing here uses one)
        torch.set_num_interop_threads(1)
    except RuntimeError:                   # set or started already in this interpreter
        pass
    fault = parse_fault(args.fault)
    apply_start_fault(fault)
    store = join(port, 2, rank, args.timeout_s)
    pg = draft_group(args.transport, args.shm_fd, port, rank, args.timeout_s, store)
    model = load_source(args.source, args.device, args.dtype)
    gc.collect()                           # no cyclic-GC pass while it serves (this process only decodes,
    gc.freeze()                            # makes almost no cycles and exits after the run): a pass stalls a
    gc.disable()                           # round (run.frozen_gc)
    report(store, "ready", rank)
    n_sent, vocab = 0, model.config.vocab_size
    serve_batch = _serve_push if args.protocol == "push" else _serve_reply
    for bi, prompts in enumerate(args.batches):
        gen = batch_generator(args.seed, bi, "draft", args.device)
        worker = DraftWorker(model, prompts, args.ws, gen, args.t_start, width=args.width)
        if args.first_rows is not None:
            worker.admitted = args.first_rows
        pending = _send(pg, apply_fault(fault, n_sent, worker.start(), vocab))
        outcome = OutcomeMessage(worker.drafter.width)
        n_sent = serve_batch(pg, worker, fault, n_sent + 1, vocab, pending, outcome)


def _serve_reply(pg: dist.ProcessGroup, worker: DraftWorker, fault, n_sent: int, vocab: int, pending: list,
                 outcome: OutcomeMessage) -> int:
    """One batch of the reply protocol: per round build, read the outcome, answer it."""
    while True:
        worker.build()                       # overlaps the verifier's verification
        worker.index_cache()
        for work, _ in pending:              # gloo completes a send only once the peer
            work.wait()                      # progresses, so never block on it before building
        pg.recv([outcome.tensor], 0, TAG).wait()    # (posting this before the build delays the reply's
                                             # delivery until the build ends: measured)
        acc, bonus, done, stop, n_fresh = outcome.read()
        worker.admitted = worker.next + n_fresh
        pending = _send(pg, apply_fault(fault, n_sent, worker.answer(acc, bonus, done), vocab))
        n_sent += 1
        if stop:
            for work, _ in pending:
                work.wait()
            return n_sent


def _serve_push(pg: dist.ProcessGroup, worker: DraftWorker, fault, n_sent: int, vocab: int, pending: list,
                outcome: OutcomeMessage) -> int:
    """One batch of the push protocol: per round build, send the cache, read the outcome, and send a
    speculation only for rows that missed (the verifier looks hits up in the cache it already holds).
    Each cache message also carries when the outcome it was built from was seen (``outcome_seen``:
    waiting started, outcome in hand), the draft's ``answer`` to it, and ``cache_sent`` (tree done, send
    starts): the hand-off stamps (with the build's ``settle`` and ``pack``)."""
    layout, seen = worker.layout, {}
    now = lambda: time.perf_counter() - worker.t_start  # noqa: E731
    q_buffers: list = [None, None]        # the q rows' messages, reused in turn as the cache's (worker.py)
    while True:
        worker.build()
        if fault is not None and fault.at == n_sent:      # misbehave as planned: pack the (garbled) cache afresh
            msg = layout.pack(apply_fault(fault, n_sent, worker.cache, vocab),
                              out=torch.empty(layout.shape(worker.drafter.width), dtype=torch.long))
        else:
            msg = worker.message
        n_sent += 1
        msgs = [(msg, TAG_CACHE)]
        if worker.cache.q is not None:
            q_buffers.reverse()
            q_buffers[0] = layout.q_rows(worker.cache.q, out=q_buffers[0], rows=worker.drafter.width)
            msgs.append((q_buffers[0], TAG_CACHE_Q))
        for work, _ in pending:
            work.wait()
        layout.stamp(msg, {**worker.times, **seen, "cache_sent": (worker.times["tree"][1], now())},
                     worker.words if msg is worker.message else None)
        pending = [(pg.send([m], 0, tag), m) for m, tag in msgs]
        worker.index_cache()                              # the draft's own lookup table, while the verifier verifies
        t_wait = now()
        pg.recv([outcome.tensor], 0, TAG).wait()
        t_seen = now()
        acc, bonus, done, stop, n_fresh = outcome.read()
        worker.admitted = worker.next + n_fresh
        if worker.take(acc, bonus, done):                 # a live row missed: its backup speculation
            pending += _send(pg, apply_fault(fault, n_sent, worker.reply(ranks=False), vocab))
            n_sent += 1
        seen = {"outcome_seen": (t_wait, t_seen), "answer": worker.answered}   # (a hit builds no Reply)
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
