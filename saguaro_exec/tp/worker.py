"""A tensor-parallel worker (rank 1..N-1): loads its shard, then follows rank 0's commands until STOP.

Started by ``tp.target.TPTarget`` through ``spawn.Supervisor`` (``serve`` is its target): a fresh
interpreter that dies with its parent. An exception's traceback goes to its error file before it exits
non-zero (``spawn.child_main``); rank 0's next collective then fails and reports it.
"""

from __future__ import annotations

import json
import os
import time

import torch

from saguaro_exec.model import KVCache
from saguaro_exec.spawn import ARGS, join, report
from saguaro_exec.tp.protocol import OP_FORWARD, OP_NEW_CACHE, OP_STOP, TPArgs, bcast, header, make_group
from saguaro_exec.tp.shard import load_tp_shard


def serve(rank: int, port: int, workdir: str) -> None:
    """Process body: connect (store key ``up``), load the shard (``ready``), serve commands."""
    with open(os.path.join(workdir, ARGS)) as f:
        args = TPArgs(**json.load(f))                 # plain JSON: the source is a checkpoint directory
    torch.set_num_threads(max(1, args.threads))
    store = join(port, len(args.devices), rank, args.timeout_s)
    group = make_group(store, rank, args.devices, args.timeout_s)
    dev = torch.device(args.devices[rank])
    model = load_tp_shard(args.source, rank, len(args.devices), group, args.devices[rank], getattr(torch, args.dtype))
    report(store, "ready", rank)
    _serve(model, group, dev, args.fault if rank == 1 else None, args.fault_kind)


@torch.inference_mode()
def _serve(model, group, dev: torch.device, fault: int | None, fault_kind: str = "raise") -> None:
    caches: dict[int, KVCache] = {}
    n_forward = 0
    while True:
        op, cid, a, b, c = bcast(group, header(device=dev)).tolist()[:5]
        if op == OP_STOP:
            return
        if op == OP_NEW_CACHE:                       # a = batch, b = capacity, c = live ids that follow
            live = set(bcast(group, torch.zeros(c, dtype=torch.long, device=dev)).tolist()) if c else set()
            for old in [k for k in caches if k not in live]:
                del caches[old]
            caches[cid] = KVCache(model.config, a, b, dev, model.dtype)
        elif op == OP_FORWARD:                       # a = batch, b = T, c = S
            idx = bcast(group, torch.zeros(3, a, b, dtype=torch.long, device=dev))
            mask = bcast(group, torch.zeros(a, b, c, dtype=torch.uint8, device=dev)).bool()
            if fault is not None and n_forward == fault:
                while fault_kind == "hang":
                    time.sleep(3600)
                raise RuntimeError(f"injected fault in a tensor-parallel worker at forward {n_forward}")
            model.hidden_states(idx[0], idx[1], caches[cid], idx[2], mask)    # lm_head: rank 0 only
            n_forward += 1
        else:
            raise RuntimeError(f"unknown tensor-parallel command {op}")
