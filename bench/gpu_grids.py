"""CUDA-graph latency grids at real shapes (random bf16 weights) and the saguaro stack level fitted to them.

Used by bench/gpu_check.py (issue 14): for each (target, draft) pair, every batch x width x context point is
captured once as a CUDA graph (saguaro_exec.model.GraphedForward) and replayed; widths cover decode (1), verify
(K+1) and tree steps (the budget). On a CPU (--quick) the same static-buffer path runs eagerly (capture=False).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from calibration import roofline
from calibration.shapes import ModelShape
from calibration.stack_fit import cross_validate_points, fit_level, predict
from calibration.stack_points import Point
from saguaro_exec.model import GraphedForward, ModelConfig, causal_mask, contiguous_slots, random_model

# (batches, widths, contexts) per side; verify widths K+1 for K = 4, 8, 16; tree widths = budgets 16..128
FULL_GRID = {"target": ((1, 4, 16), (1, 5, 9, 17), (512, 2048)),
             "draft": ((1, 4, 16), (1, 5, 17, 33, 65, 129), (512, 2048))}
QUICK_GRID = {"target": ((1, 2), (1, 5), (32,)), "draft": ((1, 2), (1, 9), (32,))}


def model_config(shape: ModelShape, max_pos: int) -> ModelConfig:
    """The executor's config for a calibration model shape."""
    return ModelConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, num_layers=shape.layers,
                       num_heads=shape.heads, num_kv_heads=shape.kv_heads, head_dim=shape.head_dim,
                       intermediate_size=shape.intermediate, tie_word_embeddings=shape.tied_embeddings,
                       rope_theta=500000.0, max_position_embeddings=max_pos)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_point(model, batch: int, t: int, ctx: int, device: str, reps: int) -> float:
    """Median seconds of one graphed (CUDA) or static-buffer (CPU) forward of [batch, t] after ctx tokens."""
    cache = model.new_cache(batch, ctx + t)
    start = torch.full((batch,), ctx, dtype=torch.long, device=device)
    slots = contiguous_slots(start, t)
    mask = causal_mask(start, t, ctx + t)
    tokens = torch.randint(0, model.config.vocab_size, (batch, t), device=device)
    fwd = GraphedForward(model, cache, t, ctx + t, capture=device.startswith("cuda"))
    for _ in range(3):
        fwd(tokens, slots, slots, mask)
    ts = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fwd(tokens, slots, slots, mask)
        sync(device)
        ts.append(time.perf_counter() - t0)
    del fwd, cache
    return float(np.median(ts))


def grid_rows(shape: ModelShape, who: str, device: str, dtype: torch.dtype, quick: bool, log) -> list[dict]:
    """Time every grid point of one model; rows {who, model, batch, new_tokens, context, median_s, graphed}."""
    batches, widths, contexts = (QUICK_GRID if quick else FULL_GRID)[who]
    model = random_model(model_config(shape, max(contexts) + max(widths) + 8), seed=0, device=device, dtype=dtype)
    rows = []
    for b in batches:
        for n in widths:
            for c in contexts:
                s = time_point(model, b, n, c, device, reps=3 if quick else 10)
                rows.append({"who": who, "model": shape.name, "batch": b, "new_tokens": n, "context": c,
                             "median_s": s, "graphed": device.startswith("cuda")})
        log(f"{shape.name} b={b}: " + ", ".join(f"{r['new_tokens']}@{r['context']}={r['median_s'] * 1e3:.2f}ms"
                                               for r in rows if r["batch"] == b))
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


def points_of(rows: list[dict], hardware, shapes: dict[str, ModelShape]) -> list[Point]:
    """The grid rows as stack-fit points, grouped by (batch, width) for the leave-one-group-out check."""
    return [Point("saguaro", "gpu_check grid", f"b{r['batch']}-n{r['new_tokens']}", hardware, shapes[r["model"]],
                  1, "step", r["batch"], r["new_tokens"], r["context"], r["median_s"]) for r in rows]


def fit_pair(rows: list[dict], hardware, target: ModelShape, draft: ModelShape, name: str) -> dict:
    """Saguaro stack fitted to one pair's grid, its held-out error, the shipped levels' errors on the same
    points, and the Profile built from the fitted stack (returned under "profile")."""
    pts = points_of(rows, hardware, {target.name: target, draft.name: draft})
    fitted = fit_level("saguaro", pts)
    cv = cross_validate_points("saguaro", pts)
    errors = {}
    for level in ("bound", "serving", "saguaro"):
        e = [abs(predict(p, level) / p.measured_s - 1) for p in pts]
        errors[f"{level}_median_abs_err"] = float(np.median(e))
    errors["fitted_cv_median_abs_err"] = float(np.median([abs(r["error"]) for r in cv]))
    prof = roofline(hardware, target, 1, draft, stack=fitted, name=name)
    prof = prof.with_(provenance={**prof.provenance, "source": "measured",
                                  "measured_by": "bench/gpu_check.py (CUDA-graph grid, random bf16 weights)",
                                  "acceptance_and_hits": "paper orientation values: random weights"})
    return {"stack": fitted.to_dict(), "errors": errors, "cv_rows": cv, "profile": prof}
