"""Microbenchmarks for calibration: forward latency over a (batch, new tokens, context) grid, link round trips."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from calibration.errors import ConfigError, check_choice, check_number
from calibration.fit import machine_info
from calibration.measurements import Measurements
from saguaro_exec.devices import is_cuda
from saguaro_exec.model import Transformer, causal_mask, contiguous_slots, load_model
from saguaro_exec.spawn import ARGS, ChildFailed, Supervisor, join

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
    """Grid covering what a run does: AR/decode steps (1), every verify width 1 .. max(ks) + 1 (the matrix
    kernels' cost is a sawtooth in rows, calibration/latency.py's tile: odd widths alone miss it); for the draft
    also tree widths (ceil(budget / draft_devices)). quick: a few points only (tests)."""
    check_choice("who", who, WHO)
    if quick:
        ks, budgets, batches, contexts = ks[:2], budgets[:2], batches[:2], contexts[:2]
        widths = {1} | {k + 1 for k in ks}
    else:
        widths = set(range(1, max(ks) + 2))
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


def forward_call(model: Transformer, batch: int, new_tokens: int, context: int, device: str) -> Callable[[], None]:
    """One forward adding new_tokens per sequence after `context` cached slots, its inputs made once (what
    ``time_forward`` times and measure/beside.py runs beside the draft)."""
    cap = context + new_tokens
    cache = model.new_cache(batch, cap)
    gen = torch.Generator().manual_seed(batch * 7919 + new_tokens * 31 + context)
    tokens = torch.randint(0, model.config.vocab_size, (batch, new_tokens), generator=gen).to(device)
    start = torch.full((batch,), context, dtype=torch.long, device=device)
    slots = contiguous_slots(start, new_tokens)
    mask = causal_mask(start, new_tokens, cap)

    @torch.inference_mode()
    def call() -> None:
        model(tokens, slots, cache, slots, mask)  # positions == slots for a contiguous prefix

    return call


def _middle(values: tuple[int, ...], default: int) -> int:
    """The grid's middle value (the shape the beside benchmark uses)."""
    return sorted(values)[len(values) // 2] if values else default


@torch.inference_mode()
def time_forward(model: Transformer, batch: int, new_tokens: int, context: int, device: str,
                 warmup: int = 2, repeats: int = 5) -> list[float]:
    """Seconds of `repeats` forwards adding new_tokens per sequence after `context` cached slots."""
    call = forward_call(model, batch, new_tokens, context, device)
    times = []
    for i in range(warmup + repeats):
        _sync(device)
        t0 = time.perf_counter()
        call()
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def profile_latency(model_or_path: Transformer | str | os.PathLike, who: str, grid: LatencyGrid | None = None,
                    device: str = "cpu", warmup: int = 2, repeats: int = 5,
                    progress: bool | Callable[[int, int], None] = False,
                    dtype: torch.dtype = torch.float32, threads: int | None = None) -> list[dict]:
    """Time one model over a grid; rows in calibration LATENCY_FIELDS (median with p10/p90 over repeats).
    The points are timed in interleaved passes (``interleaved_passes``): `warmup` untimed forwards per point in
    the first pass, then one timed forward per point and pass, as the executor alternates shapes too.

    threads: torch CPU threads while timing (restored after); match what the executor's processes use.
    """
    check_choice("who", who, WHO)
    old = torch.get_num_threads()
    if threads is not None:              # 0 is refused, not taken as "unset"
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
    total = len(points) * repeats
    bar = None
    if progress is True:
        from tqdm import tqdm

        bar = tqdm(total=total, desc=f"latency {who}", unit="forward", leave=False)
    times: list[list[float]] = [[] for _ in points]
    done = 0
    for i, order in enumerate(interleaved_passes(len(points), repeats)):
        for j in order:              # every point once per pass, so a drifting machine slows them all alike
            b, n, c = points[j]
            times[j] += time_forward(model, b, n, c, device, warmup if i == 0 else 0, 1)
            done += 1
            if bar is not None:
                bar.update(1)
            elif callable(progress):
                progress(done, total)
    if bar is not None:
        bar.close()
    rows = []
    for (b, n, c), t in zip(points, times):
        ts = np.asarray(t)
        rows.append({"who": who, "batch": b, "new_tokens": n, "context": c, "median_s": float(np.median(ts)),
                     "p10_s": float(np.percentile(ts, 10)), "p90_s": float(np.percentile(ts, 90)),
                     "n": int(len(ts))})
    return rows


def interleaved_passes(n_points: int, repeats: int, seed: int = 0) -> list[list[int]]:
    """Timing order: `repeats` passes over every point, each in its own seeded shuffle. Timed point by point,
    a machine whose speed drifts (a shared CPU) gave whole batch sizes a slow or a fast window, and the
    fitted latency a bend that is not the model's; interleaved, each point's median spans the whole run."""
    rng = np.random.default_rng(seed)
    return [[int(j) for j in rng.permutation(n_points)] for _ in range(repeats)]


def profile_pair(target: Transformer | str | os.PathLike, draft: Transformer | str | os.PathLike,
                 device: str = "cpu", ks: tuple[int, ...] = (2, 4, 6, 8), budgets: tuple[int, ...] = (8, 16, 32, 64),
                 batches: tuple[int, ...] = (1, 2, 4), contexts: tuple[int, ...] = (64, 256, 640),
                 draft_devices: int = 1, warmup: int = 2, repeats: int = 5, link: bool = True,
                 quick: bool = False, progress: bool = False, threads: int | None = None,
                 beside: bool | None = None) -> Measurements:
    """Profile both models (and the link) on this machine: the Measurements that `saguaro profile` writes.
    ``beside`` (default: on the CPU, from checkpoint paths, unless ``quick``): also how much the draft computing
    on another core slows the target's forward (measure/beside.py), in meta["beside"]."""
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
    if beside is None:
        beside = device == "cpu" and not quick and not any(isinstance(m, Transformer) for m in (target, draft))
    if beside:
        from saguaro_exec.measure.beside import beside_slowdown

        meta["beside"] = beside_slowdown(target, draft, target_tokens=_middle(ks, 4) + 1,
                                         draft_tokens=_middle(budgets, 16), context=_middle(contexts, 128))
    return Measurements(meta=meta, latency=rows, link=links)


def link_echo(rank: int, port: int, workdir: str) -> None:
    """The link benchmark's far end (a ``spawn`` target): send every message straight back to rank 0."""
    with open(os.path.join(workdir, ARGS)) as f:
        a = json.load(f)
    torch.set_num_threads(1)
    store = join(port, 2, rank, a["timeout_s"])
    pg = dist.ProcessGroupGloo(store, rank, 2, timedelta(seconds=a["timeout_s"]))
    for size in a["sizes"]:
        buf = torch.zeros(size, dtype=torch.uint8)
        for _ in range(a["warmup"] + a["repeats"]):
            pg.recv([buf], 0, 0).wait()
            pg.send([buf], 0, 0).wait()


def _round_trips(pg, size: int, warmup: int, repeats: int) -> dict:
    buf = torch.zeros(size, dtype=torch.uint8)
    times = []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        pg.send([buf], 1, 0).wait()
        pg.recv([buf], 1, 0).wait()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    ts = np.asarray(times)
    return {"bytes": int(size), "round_trip_s": float(np.median(ts)), "p10_s": float(np.percentile(ts, 10)),
            "p90_s": float(np.percentile(ts, 90)), "n": int(len(ts))}


def profile_link(sizes: tuple[int, ...] | None = None, warmup: int = 5, repeats: int = 50,
                 timeout_s: float = 120.0, stall_s: float = 10.0) -> list[dict]:
    """Median round trip of a message of each size (bytes) between this process and a child process over
    gloo (the verifier-to-draft transport), the child supervised like a run's (``spawn.Supervisor``: a
    child that dies or stays stopped for ``stall_s`` fails the benchmark; it never outlives it).

    Rows in calibration LINK_FIELDS (bytes, round_trip_s) plus p10_s, p90_s, n.
    """
    sizes = tuple(sizes or LINK_SIZES)
    for v in sizes:
        check_number("link.sizes", v, 1, 1 << 30, integer=True)
    check_number("repeats", repeats, 1, 100000, integer=True)
    args = {"sizes": [int(v) for v in sizes], "warmup": warmup, "repeats": repeats, "timeout_s": timeout_s}
    sup = Supervisor("link benchmark worker", "saguaro-link-", "saguaro_exec.measure.microbench:link_echo", 2,
                     timeout_s, stall_s)
    done = False
    try:
        store = sup.spawn(lambda path: Path(path).write_text(json.dumps(args)))
        sup.wait_for("up", "connect")
        pg = dist.ProcessGroupGloo(store, 0, 2, timedelta(seconds=timeout_s))
        rows = [_round_trips(pg, size, warmup, repeats) for size in sizes]
        done = True
    except RuntimeError as e:                     # the worker failed (ChildFailed), or the link did
        failed = e if isinstance(e, ChildFailed) else sup.failure(wait_s=3.0) or e
        raise RuntimeError(f"link benchmark got no result: {failed}") from None
    finally:
        sup.close() if done else sup.abort()      # the worker exits after its last echo
    return rows
