"""Per-row acceptance heterogeneity: one rate multiplier per calibration request, pooled per temperature.

Prompts differ: at T = 0 a tiny pair's greedy text loops on some (tokens per round 1.9 … 9.0 across 8 prompts
at K = 8), and a batch kept to its end lasts as long as its slowest row. Each row's multiplier m makes the
fitted rates (at the run's K, T, C) times m give that row's mean accepted length. A row's mean over a few
dozen rounds also carries sampling noise, which the simulator adds again when it draws the row's rounds, so
each run's row means are shrunk toward the run's mean by the between-row share of their spread (between =
spread of the means less the mean within-row variance / rounds).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from calibration.acceptance import AcceptanceModel
from calibration.fit_acceptance import MIN_TRIALS, RunRounds

MIN_ROWS = 2  # a run needs this many rows (of MIN_TRIALS speculations each) to say anything about the spread
QUANTILES = 16  # the pool is stored as this many evenly spaced quantiles (midpoints) per temperature


def row_lengths(run: RunRounds) -> dict[int, list[int]]:
    """Accepted lengths of the draft model's speculations per request (`seq`); the fast backup's are left out."""
    out: dict[int, list[int]] = defaultdict(list)
    for row in run.rounds:
        acc, seqs = row.get("accepted"), row.get("seq")
        if acc is None or seqs is None:
            continue
        acc = acc if isinstance(acc, list | tuple) else [acc]
        seqs = seqs if isinstance(seqs, list | tuple) else [seqs]
        backup = row.get("from_backup", [False] * len(acc))
        backup = backup if isinstance(backup, list | tuple) else [backup] * len(acc)
        for a, s, b in zip(acc, seqs, backup):
            if b and run.backup == "fast":
                continue
            out[int(s)].append(int(a))
    return {s: v for s, v in out.items() if len(v) >= MIN_TRIALS}


def _solve_scale(model: AcceptanceModel, run: RunRounds, target: float) -> float:
    """The multiplier m whose rates give `target` accepted tokens per speculation at the run's K, T, C."""
    from scipy.optimize import brentq  # here, not at the top: executor children import calibration

    def mean_accepted(m: float) -> float:
        return model.expected_tokens(run.k, run.temperature, run.sampler_c, scale=m) - 1.0

    hi = 1.0 / max(1e-6, float(model.rates(run.k, run.temperature, run.sampler_c).min()))
    if target <= mean_accepted(0.0):
        return 0.0
    if target >= mean_accepted(hi) - 1e-9:
        return hi
    return float(brentq(lambda m: mean_accepted(m) - target, 0.0, hi, xtol=1e-6))


def fit_row_scales(runs: list[RunRounds], model: AcceptanceModel) -> tuple[dict[float, tuple[float, ...]], dict]:
    """{T: sorted multipliers} over every SD/SSD run's rows (shrunk for sampling noise), and an info dict."""
    pools: dict[float, list[float]] = defaultdict(list)
    seen: set[tuple] = set()  # greedy passes of one config repeat exactly: count them once
    info: dict = {"runs": []}
    for run in runs:
        if run.mode == "ar":
            continue
        rows = row_lengths(run)
        if len(rows) < MIN_ROWS:
            continue
        means = np.array([np.mean(v) for v in rows.values()])
        noise = float(np.mean([np.var(v, ddof=1) / len(v) for v in rows.values()]))
        spread = float(np.var(means, ddof=1))
        share = float(np.sqrt(max(0.0, spread - noise) / spread)) if spread > 0 else 0.0
        shrunk = means.mean() + share * (means - means.mean())
        scales = [_solve_scale(model, run, float(a)) for a in shrunk]
        key = (run.mode, run.k, run.temperature, run.sampler_c, run.backup, tuple(round(m, 6) for m in scales))
        if key in seen:
            continue
        seen.add(key)
        pools[float(run.temperature)] += scales
        info["runs"].append({"mode": run.mode, "k": run.k, "temperature": run.temperature, "rows": len(rows),
                             "mean_accepted": [round(float(a), 3) for a in means], "between_share": share,
                             "scales": [round(m, 4) for m in scales]})
    q = (np.arange(QUANTILES) + 0.5) / QUANTILES
    out = {t: tuple(round(float(m), 4) for m in np.quantile(ms, q)) for t, ms in sorted(pools.items())}
    info["row_scale"] = {str(t): list(v) for t, v in out.items()}
    return out, info
