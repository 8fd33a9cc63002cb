"""Fit the stack levels' cost terms to measured points, and cross-validate (leave one group out).

Least squares on log(predicted / measured) with a weak log-normal prior on each fitted term (so a term the
points cannot pin down stays near a physically plausible value instead of running off); terms a level's
points say nothing about are fixed (SERVING_ASSUMED, SAGUARO_ASSUMED), and stated as assumptions.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares

from calibration.errors import ConfigError, check_choice
from calibration.latency import LatencyModel
from calibration.roofline import roofline_params
from calibration.stack import Stack
from calibration.stack_points import POINTS, Point

# prior centre and log-sd of each term (wide: one e-fold per sd on the fixed times)
PRIORS = {"bw_efficiency": (0.75, 0.15), "forward_s": (2e-4, 1.0), "layer_s": (3e-5, 1.0),
          "multi_token_layer_s": (2e-5, 1.0), "token_layer_s": (1e-6, 1.5), "score_bytes": (12.0, 0.7),
          "allreduce_s": (1.5e-5, 1.0)}
BOUNDS = {"bw_efficiency": (0.2, 0.95), "forward_s": (1e-6, 5e-3), "layer_s": (1e-7, 5e-4),
          "multi_token_layer_s": (1e-8, 5e-4), "token_layer_s": (1e-9, 5e-5), "score_bytes": (0.1, 200.0),
          "allreduce_s": (1e-7, 2e-4)}
PRIOR_WEIGHT = 0.3
# Serving: no published step times at verify/tree widths were found (calibration.stack_points), so the multi-token
# terms are assumptions: flash / FlashInfer-style tree attention keeps scores on chip (score_bytes 0) and reads a
# bit-packed mask (1/8 byte per query-key pair and layer); mask planning and per-token fused work are small;
# sampling reads bf16/fp32 logits about twice (fused softmax + top-k / sampling kernels). token_layer_s (1/6 of
# the 1.5 us we measured) is the term that prices wide tree steps at this level: with it at 0 the optimizer runs
# the 70B presets to the top of its K and budget ranges again. Replace it by a fit once such step times exist.
SERVING_ASSUMED = {"flops_efficiency": 0.7, "multi_token_layer_s": 1e-5, "token_layer_s": 2.5e-7,
                   "score_bytes": 0.0, "mask_bytes": 0.125, "sample_bytes": 8.0}
# Saguaro: boolean masks (1 byte per pair and layer, saguaro_exec.model.masks); matmul efficiency near the
# measured bf16 ceiling (744 of 989 TFLOP/s); tensor-parallel all-reduce not measured (one GPU): twice serving's;
# sampling: float32 logits written, then softmax (read + write) and top-k / argmax (read): ~16 bytes per logit.
SAGUARO_ASSUMED = {"flops_efficiency": 0.7, "mask_bytes": 1.0, "sample_bytes": 16.0}
FREE = {"serving": ("bw_efficiency", "forward_s", "layer_s", "allreduce_s"),
        "saguaro": ("bw_efficiency", "forward_s", "layer_s", "multi_token_layer_s", "token_layer_s", "score_bytes")}
DESCRIPTIONS = {"serving": "optimized serving stack (vLLM / SGLang class: CUDA graphs, fused kernels, flash "
                           "attention); fitted to published vLLM / NIM step times",
                "saguaro": "our executor as measured on the H200 (CUDA graphs on, SDPA with boolean tree masks); "
                           "fitted to bench/gpu_results/2026-11-30-h200"}


def predict(point: Point, stack: Stack | str) -> float:
    """Seconds the level `stack` (a Stack or a level name) predicts for one measured point."""
    lat = LatencyModel("roofline", roofline_params(point.hardware, point.model, point.tp, point.dtype_bytes,
                                                   stack=stack))
    if point.kind == "step":
        return lat(point.batch, point.new, point.context)
    if point.kind == "delta":
        return lat(point.batch, point.new, point.context_hi) - lat(point.batch, point.new, point.context)
    # e2e: prefill, then output - 1 decode steps with the context growing by one each
    steps = sum(lat(point.batch, 1, point.new + i) for i in range(point.output - 1))
    return lat(point.batch, point.new, 0.0) + steps


def _residual(point: Point, stack: Stack) -> float:
    pred = predict(point, stack)
    if point.kind == "delta":  # a difference can be ~0: relative error on the measured delta, not a log ratio
        return point.weight * (pred - point.measured_s) / point.measured_s
    return point.weight * math.log(max(pred, 1e-9) / point.measured_s)


def _assumed(level: str, fixed: dict | None) -> dict:
    base = dict(SERVING_ASSUMED if level == "serving" else SAGUARO_ASSUMED)
    if level == "saguaro":
        base["allreduce_s"] = 2 * (fixed or {}).get("serving_allreduce_s", PRIORS["allreduce_s"][0])
    return base


def fit_level(level: str, points: tuple[Point, ...] | list[Point] | None = None,
              serving_allreduce_s: float | None = None) -> Stack:
    """The Stack of `level` ("serving" | "saguaro") fitted to `points` (default: all of that level's)."""
    check_choice("level", level, tuple(FREE))
    pts = list(POINTS[level] if points is None else points)
    if not pts:
        raise ConfigError("points", "no points to fit", "at least one measured point")
    free = FREE[level]
    if level == "saguaro" and serving_allreduce_s is None:
        serving_allreduce_s = fit_level("serving").allreduce_s
    fixed = _assumed(level, {"serving_allreduce_s": serving_allreduce_s} if serving_allreduce_s else None)
    centre = np.array([math.log(PRIORS[k][0]) for k in free])
    sd = np.array([PRIORS[k][1] for k in free])
    lo = np.log([BOUNDS[k][0] for k in free])
    hi = np.log([BOUNDS[k][1] for k in free])

    def make(x: np.ndarray) -> Stack:
        terms = {**{k: 0.0 for k in ("multi_token_layer_s", "token_layer_s", "score_bytes", "allreduce_s")},
                 **fixed, **{k: float(math.exp(v)) for k, v in zip(free, x)}}
        return Stack(level, DESCRIPTIONS[level], **terms)

    def residuals(x: np.ndarray) -> np.ndarray:
        st = make(x)
        data = [_residual(p, st) for p in pts]
        return np.concatenate([data, PRIOR_WEIGHT * (x - centre) / sd])

    x0 = np.clip(centre, lo + 1e-9, hi - 1e-9)
    sol = least_squares(residuals, x0, bounds=(lo, hi), method="trf", x_scale=1.0)
    return make(sol.x)


def cross_validate(level: str) -> list[dict]:
    """Leave one group out over the level's shipped points (calibration.stack_points)."""
    check_choice("level", level, tuple(FREE))
    return cross_validate_points(level, POINTS[level])


def cross_validate_points(level: str, pts: tuple[Point, ...] | list[Point]) -> list[dict]:
    """Leave one group out: fit on the others, predict the held-out group's points. Rows per held-out point."""
    check_choice("level", level, tuple(FREE))
    serving_ar = fit_level("serving").allreduce_s if level == "saguaro" else None
    rows = []
    for group in dict.fromkeys(p.group for p in pts):
        train = [p for p in pts if p.group != group]
        if not train:
            raise ConfigError("points", "one group only: nothing to fit on", "points in two or more groups")
        st = fit_level(level, train, serving_allreduce_s=serving_ar)
        for p in (q for q in pts if q.group == group):
            pred = predict(p, st)
            model = p.model if isinstance(p.model, str) else p.model.name
            rows.append({"level": level, "group": group, "kind": p.kind, "model": model, "tp": p.tp,
                         "hardware": p.hardware if isinstance(p.hardware, str) else p.hardware.name,
                         "batch": p.batch, "new": p.new, "context": p.context, "measured_s": p.measured_s,
                         "predicted_s": pred, "error": (pred - p.measured_s) / p.measured_s, "source": p.source})
    return rows


def median_abs_error(rows: list[dict], kinds: tuple[str, ...] = ("step", "e2e")) -> float:
    """Median |relative error| over rows of the given kinds (deltas are diagnostics, not held-out times)."""
    errs = [abs(r["error"]) for r in rows if r["kind"] in kinds]
    return float(np.median(errs)) if errs else float("nan")
