"""The machine's slow speed drift within a run, as a time series of multipliers (profile.executor.drift).

A request's time per output token averages its own ~30-100 rounds, so round-to-round jitter (the 9-round-window
ratios of ``fit_ssd_round.round_jitter``) cancels in it, while what moves a request's TPOT is the machine being
faster or slower for the fraction of a second it decodes: on the shared 2-core box the 32-round window means
of one run spread 0.7-1.4x (p1-p99), and the measured p99 TPOT sat 10-23% above a simulation without it. Each
round's duration is taken relative to the median of its run's rounds of the same kind (width, and for SSD
whether a speculation missed), so a queue's tail or a miss is not read as drift; the 9-round centred running
mean of that, sampled every DRIFT_DT_S of the run's clock, is the series. The load simulator reads it at its
own clock from a seeded offset (saguaro_sim/load/engine.py).
"""

from __future__ import annotations

import numpy as np

from calibration.fit_acceptance import RunRounds, steady_rounds
from calibration.overheads import DRIFT_DT_S

DRIFT_WINDOW = 9       # rounds of the running mean (the faster part is the round jitter's)
DRIFT_MAX = 3000       # values kept in the profile: every run's share from its start, in order


def _kind(row: dict) -> tuple:
    return int(row.get("width") or row.get("batch") or 1), bool(any(row.get("from_backup") or []))


def _run_series(run: RunRounds) -> np.ndarray | None:
    rows = [r for r in steady_rounds(run) if (r.get("t1") or 0) > (r.get("t0") or 0)]
    if len(rows) < 3 * DRIFT_WINDOW:
        return None
    t = np.asarray([r["t1"] - r["t0"] for r in rows], float)
    kinds = [_kind(r) for r in rows]
    med = {k: float(np.median([x for x, kk in zip(t, kinds) if kk == k])) for k in set(kinds)}
    rel = t / np.asarray([med[k] for k in kinds])
    k = DRIFT_WINDOW
    slow = np.convolve(rel, np.ones(k), mode="same") / np.convolve(np.ones(len(rel)), np.ones(k), mode="same")
    ends = np.cumsum(t)
    grid = np.arange(0.0, ends[-1], DRIFT_DT_S)
    return slow[np.minimum(np.searchsorted(ends, grid, side="right"), len(slow) - 1)]


def speed_drift(runs: list[RunRounds]) -> tuple[list[float], dict]:
    """(series, info): the multipliers of every run with enough rounds, in order, each run's first
    DRIFT_MAX / runs values; scaled so that rounds drawn at the series' clock average 1 (slow stretches hold
    fewer rounds per second: the time mean of 1 / m is 1). Empty when no run has 3 x DRIFT_WINDOW rounds."""
    parts = [s for s in (_run_series(r) for r in runs) if s is not None and len(s)]
    if not parts:
        return [], {"n_runs": 0}
    share = max(1, DRIFT_MAX // len(parts))
    s = np.concatenate([p[:share] for p in parts])
    s = s * float(np.mean(1.0 / s))
    w = max(1, round(0.1 / DRIFT_DT_S))            # 100 ms windows: a request's decode at batch 1
    means = np.convolve(s, np.ones(w) / w, mode="valid") if len(s) >= w else s
    return [round(float(v), 4) for v in s], {
        "n_runs": len(parts), "n": int(len(s)), "dt_s": DRIFT_DT_S, "window_rounds": DRIFT_WINDOW,
        "p1_p50_p99": [float(v) for v in np.percentile(s, [1, 50, 99])],
        "p99_over_p50_100ms": float(np.percentile(means, 99) / np.percentile(means, 50))}
