"""Tensor-parallel target: rank 0 runs here (the verifier's process), ranks 1..N-1 in worker processes.

``TPTarget`` stands in for the target Transformer wherever the engines use it through ``CachedModel``:
``config`` (the full model's), ``device``, ``dtype``, ``new_cache(batch, capacity)`` and
``__call__(tokens, positions, cache, slots, mask) -> logits``. Each call broadcasts the step inputs and
every rank runs its shard of the same forward; logits come from rank 0's replicated lm_head. Workers are
spawned and supervised like the SSD draft process (``spawn.Supervisor``): a worker that dies, raises or
stays stopped for ``STALL_S`` fails the run with a ``TPWorkerError`` naming it; use it as a context
manager (cleanup on error and interrupt).
"""

from __future__ import annotations

import json
import os
import shutil
import weakref
from dataclasses import asdict

import torch

from saguaro_exec.faults import RunError
from saguaro_exec.model import KVCache, save_model
from saguaro_exec.spawn import ChildFailed, SupervisedContext, Supervisor
from saguaro_exec.tp.protocol import (
    OP_FORWARD,
    OP_NEW_CACHE,
    OP_STOP,
    TPArgs,
    bcast,
    header,
    make_group,
    op_timeout_s,
)
from saguaro_exec.tp.shard import load_tp_shard

FAULT_ENV = "SAGUARO_TP_FAULT"     # test-only: "N" or "hang:N": rank 1 raises (hangs) at forward N (0-based)
STALL_S = 10.0                     # a worker stopped (SIGSTOP) this long is killed and the run fails


class TPWorkerError(RunError):
    """A tensor-parallel worker failed; the message carries its traceback."""


class TPTarget(SupervisedContext):
    """The target split over ``args.devices`` (rank r on devices[r]); see the module docstring."""

    def __init__(self, args: TPArgs) -> None:
        if args.fault is None and os.environ.get(FAULT_ENV):
            kind, _, at = os.environ[FAULT_ENV].rpartition(":")
            args.fault, args.fault_kind = int(at), kind or "raise"
        self.args = args
        self._sup = Supervisor("tensor-parallel worker", "saguaro-tp-", "saguaro_exec.tp.worker:serve",
                               len(args.devices), args.timeout_s, STALL_S, args.start_timeout_s)
        self.group = None
        self._caches: weakref.WeakValueDictionary[int, KVCache] = weakref.WeakValueDictionary()
        self._next_id = 0

    @property
    def world(self) -> int:
        return len(self.args.devices)

    def _start_failed(self, e: ChildFailed) -> None:
        raise e.config_error or TPWorkerError(self._message(e, "start-up")) from None

    def _open(self) -> None:
        a = self.args
        store = self._sup.spawn(self._write_args)
        self._sup.wait_for("up", "connect")
        self.group = make_group(store, 0, a.devices, a.timeout_s)
        self.device = torch.device(a.devices[0])
        self.shard = load_tp_shard(a.source, 0, self.world, self.group, a.devices[0], getattr(torch, a.dtype))
        self.config = self.shard.full_config
        self.dtype = self.shard.dtype
        self._sup.wait_for("ready", "load its shard")
        os.remove(self._sup.args_file())    # only error files stay (a SIGKILL of this process leaves no weights)
        shutil.rmtree(os.path.join(self._sup.tmp, "target"), ignore_errors=True)

    def _write_args(self, path: str) -> None:
        """The workers' args: JSON, the source a checkpoint (an in-memory model is saved as one first)."""
        src = self.args.source
        if not isinstance(src, str | os.PathLike):
            src = save_model(src, os.path.join(os.path.dirname(path), "target"))
        with open(path, "w") as f:
            json.dump({**asdict(self.args), "source": os.fspath(src)}, f)

    def _collective(self, fn):
        """Run ``fn`` (rank 0's side of a collective step); a failure names the worker that caused it."""
        try:
            return fn()
        except RuntimeError as e:
            raise self._failure(e) from None

    def _failure(self, e: BaseException) -> BaseException:
        """The error to raise: a worker's traceback when one failed (or died); a TPWorkerError when rank 0's
        op timed out on live workers (one is hung); else ``e`` itself."""
        failed = self._sup.failure(wait_s=5.0)     # a worker that raised exits right after writing its traceback
        if failed is None and "Timed out" in str(e):
            failed = ChildFailed(self._sup.what, None, f"no answer within {op_timeout_s(0, self.args.timeout_s):g} s")
        return e if failed is None else TPWorkerError(self._message(failed, f"rank 0 saw: {e}"))

    @staticmethod
    def _message(failed: ChildFailed, context: str) -> str:
        who = "tensor-parallel workers" if failed.rank is None else f"tensor-parallel worker {failed.rank}"
        return f"{who} failed ({failed.how}; {context}).\n{failed.traceback}".rstrip()

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """A KV cache for ``batch`` sequences on every rank (each holding its own KV heads)."""
        cid, self._next_id = self._next_id, self._next_id + 1
        live = sorted(self._caches)

        def step() -> None:
            bcast(self.group, header(OP_NEW_CACHE, cid, batch, capacity, len(live), device=self.device))
            if live:
                bcast(self.group, torch.tensor(live, dtype=torch.long, device=self.device))

        self._collective(step)
        cache = KVCache(self.shard.config, batch, capacity, self.device, self.dtype)
        cache.tp_id = cid
        self._caches[cid] = cache
        return cache

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache, slots: torch.Tensor,
                 mask: torch.Tensor) -> torch.Tensor:
        """One sharded forward on every rank; returns rank 0's float32 logits [B, T, V]."""
        cid = getattr(cache, "tp_id", None)
        if cid is None or self._caches.get(cid) is not cache:
            raise ValueError("a tensor-parallel forward needs a cache from TPTarget.new_cache")
        b, t = tokens.shape
        dev = self.device

        def step() -> torch.Tensor:
            bcast(self.group, header(OP_FORWARD, cid, b, t, mask.shape[-1], device=dev))
            bcast(self.group, torch.stack([tokens.to(dev), positions.to(dev), slots.to(dev)]).long().contiguous())
            bcast(self.group, mask.to(dev, torch.uint8).contiguous())
            return self.shard(tokens.to(dev), positions.to(dev), cache, slots.to(dev), mask.to(dev))

        return self._collective(step)

    def close(self) -> None:
        """Stop the workers (STOP, then terminate, then kill) and remove the temp files."""
        try:
            if self.group is not None and self._sup.procs and self._sup.alive():
                try:
                    bcast(self.group, header(OP_STOP, device=self.device))
                except RuntimeError:
                    pass
        finally:
            self.group = None
            self._sup.close()

    def abort(self) -> None:
        """After an error or interrupt: kill the workers at once, then clean up."""
        self.group = None
        self._sup.abort()
