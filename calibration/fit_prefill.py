"""The executor's prefill cost from its own refills: what caching the admitted prompts but their last token costs
beyond the microbenchmarked forward, as lines of ``profile.executor`` (kinds ``prefill``, the target side, and
``draft_prefill``, SD's draft side), fitted on the prompt lengths the runs really prefilled.

Why: the microbenchmark grid times forwards of at most a few tens of new tokens per row, so a 40-60-token prompt's
prefill was the latency model extrapolated, with no executor overhead: the load runs' prefills came out 1.1-1.4x
their charge. Every round after a refill records the admitted requests (``refill``) and the seconds their batched
prefill took (``prefill_s``); each admitted row's prompt length is its context in that round (the prompt is cached
but its last token, which the round feeds). AR and SSD rounds' ``prefill_s`` is the target's prefill alone (SSD's
draft prefills in its own process, overlapped); SD's is the target's then the draft's, so the draft side is what
SD's prefills leave after the target side's fitted cost.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from calibration.fit_acceptance import RunRounds
from calibration.fit_executor import _line
from calibration.latency import LatencyModel
from calibration.overheads import ExecutorCosts


def prefill_rows(run: RunRounds) -> list[tuple[int, float, float]]:
    """(rows admitted, their mean prompt tokens, seconds) per batched prefill of one run."""
    out = []
    for row in run.rounds:
        rids, secs = row.get("refill"), row.get("prefill_s")
        if not rids or not secs or secs <= 0:
            continue
        seq, ctx = list(row.get("seq") or []), list(row.get("context") or [])
        lens = [ctx[seq.index(r)] for r in rids if r in seq and seq.index(r) < len(ctx)]
        if lens:
            out.append((len(rids), float(np.mean(lens)), float(secs)))
    return out


def _fit(points: list[tuple[int, float, float]], model) -> tuple[list[float], dict]:
    """Line of residual seconds (measured - model) against cached tokens (rows x (prompt - 1), the prompt rounded
    as saguaro_sim.load.costs.prefill_cost rounds it), per token count."""
    shapes = [(rows, max(1, round(prompt) - 1), secs) for rows, prompt, secs in points]   # (rows, cached, s)
    by: dict[float, list[float]] = {}
    for rows, cached, secs in shapes:
        by.setdefault(float(rows * cached), []).append(secs - model(rows, cached))
    xs = np.asarray(sorted(by))
    ys = np.asarray([np.mean(by[x]) for x in xs])
    ns = np.asarray([len(by[x]) for x in xs], float)
    line = _line(xs, ys, ns, min_slope=-_model_slope(model, xs))
    if line[1] and min(model(b, c) + line[0] + line[1] * b * c for b, c, _ in shapes) <= 0:
        # what prefill_cost charges a fitted prefill before its clip at 0: one row count timed in a slow spell
        # (2026-12-03, beside three busy loops: 3 rows 21.6 ms against 0.8-1.0 ms for 1 and 2) tilted the line
        # to charge the 1-row prefill -2.6 ms, the clip raised the charges above what the prefills measured, and
        # a prefill costing nothing is no fit; the flat mean keeps the sum (its residuals add to 0)
        line = [float(np.average(ys, weights=ns)), 0.0]
    return line, {"n": len(points), "line": line, "tokens": [float(xs.min()), float(xs.max())],
                  "mean_residual_s": float(np.average(ys, weights=ns))}


def _model_slope(model, xs: np.ndarray) -> float:
    """The model's seconds per cached token over the fitted range (1 row at its ends). The residual line may fall
    by less than this, so the charge (model + line) still grows with the tokens: the microbenchmark grid's
    per-token cost, extrapolated to 40-60-token prompts, is steeper than the executor's batched prefill
    (2026-12-03: 4.25 -> 10.63 ms at 1 -> 4 rows of 47 tokens against 3.16 -> 8.09 timed), so the residual falls
    ~0.01 ms a token, and a flat line through it charged a 1-row prefill 2.34 ms against its 3.16."""
    lo, hi = float(xs.min()), float(xs.max())
    return (model(1, hi) - model(1, lo)) / (hi - lo) if hi > lo else 0.0


def fit_prefill(target: LatencyModel, draft: LatencyModel, runs: list[RunRounds]) -> tuple[dict, dict]:
    """({kind: [base_s, per_token_s]} for ``prefill`` / ``draft_prefill``, info) from the runs' refills (both
    regimes pooled: a prefill samples nothing); kinds no run measured are left out."""
    lines: dict[str, list[float]] = {}
    info: dict = {}
    own = [p for r in runs if r.mode in ("ar", "ssd") for p in prefill_rows(r)]
    if own:
        lines["prefill"], info["prefill"] = _fit(own, lambda b, n: target(b, n, 0.0))
    sd = [p for r in runs if r.mode == "sd" for p in prefill_rows(r)]
    if sd:
        t_line = lines.get("prefill", [0.0, 0.0])

        def target_side(b: int, n: float) -> float:
            return target(b, n, 0.0) + t_line[0] + t_line[1] * b * n

        lines["draft_prefill"], info["draft_prefill"] = _fit(
            sd, lambda b, n: target_side(b, n) + draft(b, n, 0.0))
        if "prefill" not in lines:
            info["draft_prefill"]["note"] = "no AR / SSD refills: the target side's overhead is in this line too"
    return lines, info


def fit_prefill_points(target: LatencyModel, draft: LatencyModel, target_points: list[tuple[int, float, float]],
                       draft_points: list[tuple[int, float, float]] | None = None) -> tuple[dict, dict]:
    """The same lines from timed prefills of each side alone ((rows, mean prompt tokens, seconds), e.g.
    saguaro_exec.measure.prefill.time_prefills): ``prefill`` against the target model, ``draft_prefill`` the draft's."""
    lines: dict[str, list[float]] = {}
    info: dict = {}
    for kind, pts, model in (("prefill", target_points, target), ("draft_prefill", draft_points or [], draft)):
        if pts:
            lines[kind], info[kind] = _fit(pts, lambda b, n, m=model: m(b, n, 0.0))
            info[kind]["from"] = "timed prefills"
    return lines, info


def with_prefill(costs: ExecutorCosts | None, lines: dict) -> ExecutorCosts | None:
    """``costs`` with the prefill (or loop, calibration/fit_loop.py) lines added to its greedy regime (neither
    samples anything, so the sampled regime falls back to them); unchanged when there are none."""
    if not lines:
        return costs
    costs = costs or ExecutorCosts()
    merged = {r: dict(v) for r, v in costs.lines.items()}
    merged.setdefault("greedy", {}).update({k: list(v) for k, v in lines.items()})
    return replace(costs, lines=merged)
