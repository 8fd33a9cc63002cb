"""Prefill timings on the executor's own path: ``CachedModel.prefill_rows`` (what a refill runs on each side) for
1.. rows of given prompts, each cached but its last token, so a profile's prefill cost can be fitted on the prompt
lengths a load file really uses (calibration/fit_prefill.fit_prefill_points) instead of extrapolating the
microbenchmark grid's few-token forwards."""

from __future__ import annotations

import time

import numpy as np
import torch

from saguaro_exec.engine.cached_model import CachedModel, kv_capacity
from saguaro_exec.model import Transformer


@torch.inference_mode()
def time_prefills(model: Transformer, prompts: list[list[int]], rows: tuple[int, ...] = (1, 2, 4),
                  repeats: int = 5, threads: int | None = None) -> list[tuple[int, float, float]]:
    """(rows, mean prompt tokens, median seconds) of batched prefills of ``rows`` prompts at a time, the
    prompts taken in turn (cycled), in ``repeats`` passes over every row count (1, 2, 4, 1, 2, 4, ...) after an
    untimed one. Why passes: a host's speed swings last a second or more, and timed back to back one row count
    could take all of a slow spell (2026-12-02: the 4-row prefill read 22.7 ms against 7.2 ms the session before,
    and the line fitted through it charged a 1-row prefill nothing)."""
    if threads is not None:
        torch.set_num_threads(threads)
    runner = CachedModel(model, max(rows), kv_capacity(prompts, 1))
    secs: dict[int, list[float]] = {n: [] for n in rows}
    lens: dict[int, list[float]] = {n: [] for n in rows}
    at = 0
    for rep in range(repeats + 1):
        for n in rows:
            batch = [prompts[(at + j) % len(prompts)] for j in range(n)]
            at += n
            t0 = time.perf_counter()
            runner.prefill_rows(list(range(n)), [p[:-1] for p in batch])
            dt = time.perf_counter() - t0
            if rep:
                secs[n].append(dt)
                lens[n].append(float(np.mean([len(p) for p in batch])))
    return [(n, float(np.mean(lens[n])), float(np.median(secs[n]))) for n in rows]
