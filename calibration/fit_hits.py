"""Hit-curve fit: empirical P(bonus rank < F) by position and source from recorded ranks, plus a power law."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from calibration.errors import ConfigError
from calibration.fit_acceptance import RunRounds, _seq_values
from calibration.hits import HitCurve

DEFAULT_TOP_N = 64  # the executor records ranks among the draft's top 64 (-1 beyond); meta["top_n"] overrides
MIN_SAMPLES = 20  # positions with fewer ranks than this use the table pooled over positions


def collect_ranks(run: RunRounds) -> dict[str, list[tuple[int, int]]]:
    """{"primary"|"backup": [(accepted length, bonus rank), ...]} for sequence-rounds with a recorded rank."""
    out: dict[str, list[tuple[int, int]]] = {"primary": [], "backup": []}
    for i, row in enumerate(run.rounds):
        ranks, acc = row.get("bonus_rank"), row.get("accepted")
        if ranks is None or acc is None:
            continue
        ranks = ranks if isinstance(ranks, list | tuple) else [ranks]
        acc = acc if isinstance(acc, list | tuple) else [acc]
        if len(ranks) != len(acc):
            raise ConfigError(f"rounds[{i}].bonus_rank", f"{len(ranks)} ranks for {len(acc)} sequences",
                              "one rank per sequence")
        backup = _seq_values(row, "from_backup", len(acc), False)
        for a, rk, b in zip(acc, ranks, backup):
            if rk is None or (run.mode == "sd" and int(a) >= run.k):
                continue  # SD drafts no row at position K: its rank there is unknown, not a miss
            out["backup" if b else "primary"].append((int(a), int(rk)))
    return out


def hit_table(pairs: list[tuple[int, int]], top_n: int) -> np.ndarray:
    """hit[F] = P(0 <= rank < F) for F = 0..top_n (ranks -1 or >= top_n count as misses)."""
    r = np.asarray([rk for _, rk in pairs], dtype=int)
    f = np.arange(top_n + 1)
    inside = (r >= 0) & (r < top_n)
    return np.asarray([float(np.mean(inside & (r < fi))) for fi in f])


def fit_power_law(hit: np.ndarray, n: int) -> dict:
    """miss(F) = c F^-r by least squares in log space over F >= 1 with nonzero miss; R^2 in log space."""
    f = np.arange(len(hit))[1:]
    miss = 1.0 - hit[1:]
    ok = miss > 0
    if ok.sum() < 2:
        c = float(miss[ok][0]) if ok.any() else 0.5 / max(n, 1)
        return {"c": min(10.0, c), "r": 0.0, "r2": None, "points": int(ok.sum())}
    lx, ly = np.log(f[ok]), np.log(miss[ok])
    slope, icpt = np.polyfit(lx, ly, 1)
    pred = icpt + slope * lx
    ss_tot = float(((ly - ly.mean()) ** 2).sum())
    ss_res = float(((ly - pred) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res < 1e-12 else 0.0)
    return {"c": float(np.clip(np.exp(icpt), 0.0, 10.0)), "r": float(np.clip(-slope, 0.0, 10.0)), "r2": float(r2),
            "points": int(ok.sum())}


def fit_source(pairs: list[tuple[int, int]], top_n: int) -> tuple[dict, dict]:
    """HitCurve spec {"c", "r", "table"} for one (temperature, C, source) and its fit info."""
    pooled = hit_table(pairs, top_n)
    kmax = max(a for a, _ in pairs)
    table, per_pos = [], []
    for k in range(kmax + 1):
        at_k = [p for p in pairs if p[0] == k]
        per_pos.append(len(at_k))
        table.append(hit_table(at_k, top_n) if len(at_k) >= MIN_SAMPLES else pooled)
    law = fit_power_law(pooled, len(pairs))
    spec = {"c": law["c"], "r": law["r"], "table": [[float(v) for v in row] for row in table]}
    info = {**law, "n": len(pairs), "top_n": top_n, "samples_by_position": per_pos,
            "pooled_hit": [float(v) for v in pooled]}
    return spec, info


def fit_hits(runs: list[RunRounds]) -> tuple[HitCurve, dict]:
    """Hit curves per temperature (largest C there) for primary and backup, with a miss multiplier per lower C."""
    groups: dict[float, dict[float, list[RunRounds]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.mode != "ar":
            groups[float(r.temperature)][float(r.sampler_c)].append(r)
    by_t, info_t = {}, {}
    ratios: dict[float, list[tuple[float, int]]] = defaultdict(list)
    for t, by_c in sorted(groups.items()):
        fitted = {}
        for c, rs in by_c.items():
            pairs = {"primary": [], "backup": []}
            for r in rs:
                for src, ps in collect_ranks(r).items():
                    pairs[src] += ps
            if not pairs["primary"]:
                continue
            ranks = [rk for ps in pairs.values() for _, rk in ps]
            top_n = min((r.top_n for r in rs if r.top_n), default=max(DEFAULT_TOP_N, max(ranks) + 1))
            fitted[c] = {src: fit_source(ps, top_n) for src, ps in pairs.items() if ps}
        if not fitted:
            continue
        ref = max(fitted)
        by_t[t] = {src: spec for src, (spec, _) in fitted[ref].items()}
        info_t[t] = {str(c): {src: inf for src, (_, inf) in f.items()} for c, f in fitted.items()}
        ref_miss = 1.0 - np.mean(fitted[ref]["primary"][1]["pooled_hit"][1:])
        for c, f in fitted.items():
            if c < ref and ref_miss > 0:
                miss = 1.0 - np.mean(f["primary"][1]["pooled_hit"][1:])
                ratios[c].append((float(miss / ref_miss), f["primary"][1]["n"]))
    if not by_t:
        raise ConfigError("measurements.rounds", "no bonus-token ranks recorded to fit hit curves",
                          "runs in mode sd or ssd with per-round 'bonus_rank'")
    c_effect = {c: float(np.average([m for m, _ in v], weights=[w for _, w in v])) for c, v in ratios.items()}
    info = {"by_temperature": {str(t): v for t, v in info_t.items()},
            "c_effect": {str(c): m for c, m in c_effect.items()}}
    return HitCurve(by_t, c_effect), info
