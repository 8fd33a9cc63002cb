"""Microbenchmarks for calibration: forward latency over a (batch, new tokens, context) grid, link round trips."""

from __future__ import annotations

import datetime as _dt
import math
import os
import queue
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as mp

from calibration.errors import ConfigError, check_choice, check_number
from calibration.fit import machine_info
from calibration.measurements import Measurements
from saguaro_exec.devices import is_cuda
from saguaro_exec.model import Transformer, causal_mask, contiguous_slots, load_model

WHO = ("target", "draft")
LINK_SIZES = (16, 256, 4096, 65536, 1 << 20)


@dataclass(frozen=True)
class LatencyGrid:
    """Shapes to time: every batch x new_tokens x context combination."""

    batches: tuple[int, ...] = (1, 2, 4)
    new_tokens: tuple[int, ...] = (1, 2, 4, 8, 16)
    contexts: tuple[int, ...] = (64, 256)

    def __post_init__(self) -> None:
        for name, lo in (("batches", 1), ("new_tokens", 1), ("contexts", 0)):
            vals = getattr(self, name)
            if not vals:
                raise ConfigError(f"grid.{name}", "empty", f"one or more integers >= {lo}")
            for v in vals:
                check_number(f"grid.{name}", v, lo, 1 << 20, integer=True)
            object.__setattr__(self, name, tuple(sorted({int(v) for v in vals})))

    def points(self) -> list[tuple[int, int, int]]:
        return [(b, n, c) for b in self.batches for n in self.new_tokens for c in self.contexts]


def default_grid(who: str, ks: tuple[int, ...] = (2, 4, 6, 8), budgets: tuple[int, ...] = (8, 16, 32, 64),
                 batches: tuple[int, ...] = (1, 2, 4), contexts: tuple[int, ...] = (64, 256, 640),
                 draft_devices: int = 1, quick: bool = False) -> LatencyGrid:
    """Grid covering what a run does: AR/decode steps (1), verify widths (K+1); for the draft also tree
    widths (ceil(budget / draft_devices)). quick: a few points only (tests)."""
    check_choice("who", who, WHO)
    if quick:
        ks, budgets, batches, contexts = ks[:2], budgets[:2], batches[:2], contexts[:2]
    widths = {1} | {k + 1 for k in ks}
    if who == "draft":
        widths |= {math.ceil(b / draft_devices) for b in budgets}
    return LatencyGrid(tuple(batches), tuple(sorted(widths)), tuple(contexts))


def _as_model(model_or_path: Transformer | str | os.PathLike, device: str,
              dtype: torch.dtype) -> tuple[Transformer, str]:
    if isinstance(model_or_path, Transformer):
        return model_or_path.to(device), getattr(model_or_path, "name", "model")
    path = Path(model_or_path)
    return load_model(path, device=device, dtype=dtype), str(path)


def _sync(device: str) -> None:
    if is_cuda(device):
        torch.cuda.synchronize()


@torch.inference_mode()
def time_forward(model: Transformer, batch: int, new_tokens: int, context: int, device: str,
                 warmup: int = 2, repeats: int = 5) -> list[float]:
    """Seconds of `repeats` forwards adding new_tokens per sequence after `context` cached slots."""
    cap = context + new_tokens
    cache = model.new_cache(batch, cap)
    gen = torch.Generator().manual_seed(batch * 7919 + new_tokens * 31 + context)
    tokens = torch.randint(0, model.config.vocab_size, (batch, new_tokens), generator=gen).to(device)
    start = torch.full((batch,), context, dtype=torch.long, device=device)
    slots = contiguous_slots(start, new_tokens)
    mask = causal_mask(start, new_tokens, cap)
    times = []
    for i in range(warmup + repeats):
        _sync(device)
        t0 = time.perf_counter()
        model(tokens, slots, cache, slots, mask)  # positions == slots for a contiguous prefix
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def profile_latency(model_or_path: Transformer | str | os.PathLike, who: str, grid: LatencyGrid | None = None,
                    device: str = "cpu", warmup: int = 2, repeats: int = 5,
                    progress: bool | Callable[[int, int], None] = False,
                    dtype: torch.dtype = torch.float32, threads: int | None = None) -> list[dict]:
    """Time one model over a grid; rows in calibration LATENCY_FIELDS (median with p10/p90 over repeats).

    threads: torch CPU threads while timing (restored after); match what the executor's processes use.
    """
    check_choice("who", who, WHO)
    old = torch.get_num_threads()
    if threads:
        check_number("threads", threads, 1, 1024, integer=True)
        torch.set_num_threads(int(threads))
    try:
        return _profile(model_or_path, who, grid, device, warmup, repeats, progress, dtype)
    finally:
        torch.set_num_threads(old)


def _profile(model_or_path, who, grid, device, warmup, repeats, progress, dtype) -> list[dict]:
    check_number("warmup", warmup, 0, 1000, integer=True)
    check_number("repeats", repeats, 1, 10000, integer=True)
    model, _ = _as_model(model_or_path, device, dtype)
    grid = grid or default_grid(who)
    limit = model.config.max_position_embeddings
    points = [p for p in grid.points() if p[1] + p[2] <= limit]
    if not points:
        raise ConfigError("grid.contexts", f"every context + new_tokens exceeds the model's {limit} positions",
                          f"context + new_tokens <= {limit}")
    big = max(points, key=lambda p: p[0] * p[1])
    time_forward(model, big[0], big[1], big[2], device, warmup=max(1, warmup), repeats=1)  # first-call costs
    bar = None
    if progress is True:
        from tqdm import tqdm

        bar = tqdm(total=len(points), desc=f"latency {who}", unit="shape", leave=False)
    rows = []
    for i, (b, n, c) in enumerate(points):
        ts = np.asarray(time_forward(model, b, n, c, device, warmup, repeats))
        rows.append({"who": who, "batch": b, "new_tokens": n, "context": c, "median_s": float(np.median(ts)),
                     "p10_s": float(np.percentile(ts, 10)), "p90_s": float(np.percentile(ts, 90)),
                     "n": int(len(ts))})
        if bar is not None:
            bar.update(1)
        elif callable(progress):
            progress(i + 1, len(points))
    if bar is not None:
        bar.close()
    return rows


def profile_pair(target: Transformer | str | os.PathLike, draft: Transformer | str | os.PathLike,
                 device: str = "cpu", ks: tuple[int, ...] = (2, 4, 6, 8), budgets: tuple[int, ...] = (8, 16, 32, 64),
                 batches: tuple[int, ...] = (1, 2, 4), contexts: tuple[int, ...] = (64, 256, 640),
                 draft_devices: int = 1, warmup: int = 2, repeats: int = 5, link: bool = True,
                 quick: bool = False, progress: bool = False, threads: int | None = None) -> Measurements:
    """Profile both models (and the link) on this machine: the Measurements that `saguaro profile` writes."""
    rows = []
    names = {}
    for who, m in (("target", target), ("draft", draft)):
        model, names[who] = _as_model(m, device, torch.float32)
        grid = default_grid(who, ks, budgets, batches, contexts, draft_devices, quick)
        rows += profile_latency(model, who, grid, device, warmup, repeats if not quick else min(repeats, 3),
                                progress, threads=threads)
        if who == "target":
            vocab = model.config.vocab_size
    links = profile_link(repeats=10 if quick else 50, sizes=(64, 4096, 262144) if quick else None) if link else []
    meta = {"kind": "microbench", "device": device, "machine": machine_info(), "target": names["target"],
            "draft": names["draft"], "vocab_size": vocab, "torch": torch.__version__,
            "threads": threads or torch.get_num_threads(), "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "grid": {"ks": list(ks), "budgets": list(budgets), "batches": list(batches), "contexts": list(contexts),
                     "quick": quick}}
    return Measurements(meta=meta, latency=rows, link=links)


def free_port() -> int:
    """A TCP port the OS reports free right now (no hard-coded ports)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _link_worker(rank: int, port: int, sizes: tuple[int, ...], warmup: int, repeats: int, out) -> None:
    import datetime

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        rows = []
        for size in sizes:
            buf = torch.zeros(size, dtype=torch.uint8)
            times = []
            for i in range(warmup + repeats):
                t0 = time.perf_counter()
                if rank == 0:
                    dist.send(buf, 1)
                    dist.recv(buf, 1)
                else:
                    dist.recv(buf, 0)
                    dist.send(buf, 0)
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
            ts = np.asarray(times)
            rows.append({"bytes": int(size), "round_trip_s": float(np.median(ts)),
                         "p10_s": float(np.percentile(ts, 10)), "p90_s": float(np.percentile(ts, 90)),
                         "n": int(len(ts))})
        dist.barrier()
        if rank == 0:
            out.put(rows)
    finally:
        dist.destroy_process_group()


def profile_link(sizes: tuple[int, ...] | None = None, warmup: int = 5, repeats: int = 50,
                 timeout_s: float = 120.0) -> list[dict]:
    """Median round trip of a message of each size (bytes) between two processes over torch.distributed gloo.

    Rows in calibration LINK_FIELDS (bytes, round_trip_s) plus p10_s, p90_s, n. Both processes exit cleanly.
    """
    sizes = tuple(sizes or LINK_SIZES)
    for v in sizes:
        check_number("link.sizes", v, 1, 1 << 30, integer=True)
    check_number("repeats", repeats, 1, 100000, integer=True)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_link_worker, args=(r, port, sizes, warmup, repeats, out), daemon=True)
             for r in (0, 1)]
    for p in procs:
        p.start()
    rows = None
    deadline = time.monotonic() + timeout_s
    try:
        while rows is None:
            try:
                rows = out.get(timeout=0.5)
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"link benchmark got no result (worker exit codes "
                                       f"{[p.exitcode for p in procs]}, waited up to {timeout_s}s)") from None
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        raise RuntimeError(f"link benchmark worker exited with {bad}")
    return rows
