"""Synthetic grids and runs with known truth, shared by the fit tests."""

from __future__ import annotations

import numpy as np

from calibration import Measurements


def grid_rows(who, fn, seed=0, noise=0.01):
    rng = np.random.default_rng(seed)
    rows = []
    for b in (1, 2, 4):
        for n in (1, 2, 4, 8, 16, 32):
            for ctx in (16, 128, 512):
                y = fn(b * n, b * ctx) * float(np.exp(rng.normal(0, noise)))
                rows.append({"who": who, "batch": b, "new_tokens": n, "context": ctx, "median_s": y,
                             "p10_s": y * 0.98, "p90_s": y * 1.02, "n": 5})
    return rows


def sample_rounds(rates, k, n_rounds, batch, seed, c=0.3, r=0.5, c_b=0.6, r_b=0.4, top_n=64, backup_frac=0.0,
                  backup_rates=None):
    """Round rows with accepted lengths from per-position `rates` and bonus ranks from miss(F) = c F^-r; a
    `backup_frac` share of speculations come from the backup and accept per `backup_rates` (None: nothing)."""
    rng = np.random.default_rng(seed)

    def rank(cc, rr):
        u = rng.uniform()
        rk = int(np.ceil((cc / u) ** (1 / rr))) - 1 if u < cc else 0
        return rk if rk < top_n else -1

    rows = []
    for i in range(n_rounds):
        acc, ranks, back = [], [], []
        for _ in range(batch):
            b = bool(rng.uniform() < backup_frac)
            a, rs = 0, (backup_rates or (0.0,)) if b else rates
            while a < k and rng.uniform() < rs[min(a, len(rs) - 1)]:
                a += 1
            acc.append(a)
            back.append(b)
            ranks.append(rank(c_b, r_b) if b else rank(c, r))
        rows.append({"round": i, "batch": batch, "verify_s": 0.01, "accepted": acc, "hit": [True] * batch,
                     "from_backup": back, "bonus_rank": ranks, "context": [100] * batch})
    return rows


def run_meas(rates, k=4, temperature=0.0, sampler_c=1.0, n_rounds=1500, batch=2, seed=1, backup="neural", **kw):
    spec = {"mode": "ssd", "k": k, "temperature": temperature, "sampler_c": sampler_c, "backup": backup}
    return Measurements(meta={"spec": spec, "top_n": 64, "target": "t", "draft": "d"},
                        rounds=sample_rounds(rates, k, n_rounds, batch, seed, **kw))


def lin_truth(x, z):
    return 0.002 + 3e-5 * x + 2e-7 * z


def pw_truth(x, z):
    return 0.004 + 1.5e-4 * max(0.0, x - 32) + 1e-7 * z


def grid():
    return Measurements(meta={"device": "cpu"}, latency=grid_rows("target", lin_truth) + grid_rows("draft", pw_truth, 1),
                        link=[{"bytes": b, "round_trip_s": 2 * (1e-4 + b / 1e9)} for b in (64, 4096, 65536, 1 << 20)])
