"""A tensor-parallel worker (rank 1..N-1): loads its shard, then follows rank 0's commands until STOP.

Started by ``tp.TPTarget`` through ``tp_entry`` (a fresh interpreter that dies with its parent). Any
exception's traceback goes to ERR_FILE before it exits non-zero; rank 0's next collective then fails and
reports it.
"""

from __future__ import annotations

import json
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from saguaro_exec.model import KVCache
from saguaro_exec.tp.protocol import OP_FORWARD, OP_NEW_CACHE, OP_STOP, TPArgs, bcast, header, make_group
from saguaro_exec.tp.shard import load_tp_shard


def worker_main(args: TPArgs, rank: int, port: int, err_file: str) -> None:
    """Process body: connect, load the shard, signal ready, serve commands."""
    try:
        torch.set_num_threads(max(1, args.threads))
        store = dist.TCPStore("127.0.0.1", port, len(args.devices), False,
                              timeout=timedelta(seconds=args.timeout_s))
        store.set(f"tp_up_{rank}", "1")
        group = make_group(store, rank, args.devices, args.timeout_s)
        dev = torch.device(args.devices[rank])
        model = load_tp_shard(args.source, rank, len(args.devices), group, args.devices[rank],
                              getattr(torch, args.dtype))
        group.allreduce([torch.ones(1, device=dev)]).wait()                # loaded
        _serve(model, group, dev, args.fault if rank == 1 else None)
    except BaseException:
        with open(err_file, "w") as f:
            f.write(traceback.format_exc())
        sys.exit(1)


@torch.inference_mode()
def _serve(model, group, dev: torch.device, fault: int | None) -> None:
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
                raise RuntimeError(f"injected fault in a tensor-parallel worker at forward {n_forward}")
            model.hidden_states(idx[0], idx[1], caches[cid], idx[2], mask)    # lm_head: rank 0 only
            n_forward += 1
        else:
            raise RuntimeError(f"unknown tensor-parallel command {op}")


def main(argv: list[str]) -> None:
    """Arguments after the parent pid: RANK PORT ARGS_FILE ERR_FILE (see ``tp_entry``)."""
    rank, port, args_file, err_file = int(argv[1]), int(argv[2]), argv[3], argv[4]
    with open(args_file) as f:
        args = TPArgs(**json.load(f))                 # plain JSON: the source is a checkpoint directory
    worker_main(args, rank, port, err_file)
