"""Tensor-parallel target: rank 0 runs here (the verifier's process), ranks 1..N-1 in worker processes.

``TPTarget`` stands in for the target Transformer wherever the engines use it through ``CachedModel``:
``config`` (the full model's), ``device``, ``dtype``, ``new_cache(batch, capacity)`` and
``__call__(tokens, positions, cache, slots, mask) -> logits``. Each call broadcasts the step inputs and
every rank runs its shard of the same forward; logits come from rank 0's replicated lm_head. Workers are
spawned like the SSD draft process: a TCPStore on a free port, a new session, death with the parent, a
traceback file on error, and cleanup on error and interrupt (use it as a context manager).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import asdict
from datetime import timedelta

import torch
import torch.distributed as dist

from saguaro_exec.faults import RunError
from saguaro_exec.model import KVCache, save_model
from saguaro_exec.tp.protocol import OP_FORWARD, OP_NEW_CACHE, OP_STOP, TPArgs, bcast, header, make_group
from saguaro_exec.tp.shard import load_tp_shard

FAULT_ENV = "SAGUARO_TP_FAULT"     # test-only: rank 1 raises at this (0-based) forward


class TPWorkerError(RunError):
    """A tensor-parallel worker failed; the message carries its traceback."""


class TPTarget:
    """The target split over ``args.devices`` (rank r on devices[r]); see the module docstring."""

    def __init__(self, args: TPArgs) -> None:
        if args.fault is None and os.environ.get(FAULT_ENV):
            args.fault = int(os.environ[FAULT_ENV])
        self.args = args
        self.procs: list[subprocess.Popen] = []
        self.group = None
        self._tmp: str | None = None
        self._caches: weakref.WeakValueDictionary[int, KVCache] = weakref.WeakValueDictionary()
        self._next_id = 0

    @property
    def world(self) -> int:
        return len(self.args.devices)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def __enter__(self) -> TPTarget:
        try:
            self._open()
        except BaseException:
            self.abort()
            raise
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _open(self) -> None:
        a = self.args
        store = dist.TCPStore("127.0.0.1", 0, self.world, True, timeout=timedelta(seconds=a.timeout_s),
                              wait_for_workers=False)
        self._tmp = tempfile.mkdtemp(prefix="saguaro-tp-")
        src = a.source                  # workers read a checkpoint: an in-memory model is saved as one first
        if not isinstance(src, str | os.PathLike):
            src = save_model(src, os.path.join(self._tmp, "target"))
        args_file = os.path.join(self._tmp, "args.json")
        with open(args_file, "w") as f:
            json.dump({**asdict(a), "source": os.fspath(src)}, f)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        for rank in range(1, self.world):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "saguaro_exec.tp.entry", str(os.getpid()), str(rank), str(store.port),
                 args_file, self._err_file(rank)], env=env, start_new_session=True))
        deadline = time.monotonic() + a.timeout_s
        while not store.check([f"tp_up_{r}" for r in range(1, self.world)]):
            for p in self.procs:
                if p.poll() is not None:
                    raise self._failure(RuntimeError(f"exit code {p.returncode} before connecting"))
            if time.monotonic() > deadline:
                raise TPWorkerError(f"tensor-parallel workers did not connect within {a.timeout_s} s")
            time.sleep(0.02)
        self._store = store
        self.group = make_group(store, 0, a.devices, a.timeout_s)
        self.device = torch.device(a.devices[0])
        self.shard = load_tp_shard(a.source, 0, self.world, self.group, a.devices[0], getattr(torch, a.dtype))
        self.config = self.shard.full_config
        self.dtype = self.shard.dtype
        self._collective(lambda: self.group.allreduce([torch.ones(1, device=self.device)]).wait())   # all loaded
        os.remove(args_file)            # only error files stay (a SIGKILL of this process leaves no weights)
        shutil.rmtree(os.path.join(self._tmp, "target"), ignore_errors=True)

    def _err_file(self, rank: int) -> str:
        return os.path.join(self._tmp, f"error-{rank}.txt")

    def _collective(self, fn):
        """Run ``fn`` (rank 0's side of a collective step); a failure names the worker that caused it."""
        try:
            return fn()
        except RuntimeError as e:
            raise self._failure(e) from None

    def _failure(self, e: BaseException) -> BaseException:
        """The error to raise: a worker's traceback when one failed (or died), else ``e`` itself."""
        end = time.monotonic() + 5.0
        while time.monotonic() < end and all(p.poll() is None for p in self.procs):
            time.sleep(0.02)                       # a worker that raised exits right after writing its traceback
        for rank, p in enumerate(self.procs, start=1):
            if p.poll() is None:
                continue
            tb = ""
            path = self._err_file(rank)
            if os.path.exists(path):
                with open(path) as f:
                    tb = f.read().strip()
            how = f"killed by signal {-p.returncode}" if p.returncode < 0 else f"exit code {p.returncode}"
            return TPWorkerError(f"tensor-parallel worker {rank} failed ({how}; rank 0 saw: {e}).\n{tb}".rstrip())
        return e

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
        if self.group is not None and all(p.poll() is None for p in self.procs):
            try:
                bcast(self.group, header(OP_STOP, device=self.device))
            except RuntimeError:
                pass
        for p in self.procs:
            for stop in (lambda: None, p.terminate, p.kill):
                if p.poll() is not None:
                    break
                stop()
                try:
                    p.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    continue
        self._release()

    def abort(self) -> None:
        """After an error or interrupt: kill the workers at once, then clean up."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self._release()

    def _release(self) -> None:
        self.group = None
        self._store = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
