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
                  repeats: int = 3, threads: int | None = None) -> list[tuple[int, float, float]]:
    """(rows, mean prompt tokens, median seconds) of batched prefills of ``rows`` prompts at a time, the
    prompts taken in turn (cycled); one untimed warm-up per row count."""
    if threads is not None:
        torch.set_num_threads(threads)
    runner = CachedModel(model, max(rows), kv_capacity(prompts, 1))
    out, at = [], 0
    for n in rows:
        secs, lens = [], []
        for rep in range(repeats + 1):
            batch = [prompts[(at + j) % len(prompts)] for j in range(n)]
            at += n
            t0 = time.perf_counter()
            runner.prefill_rows(list(range(n)), [p[:-1] for p in batch])
            dt = time.perf_counter() - t0
            if rep:
                secs.append(dt)
                lens.append(float(np.mean([len(p) for p in batch])))
        out.append((n, float(np.mean(lens)), float(np.median(secs))))
    return out
