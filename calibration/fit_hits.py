"""Hit-curve fit: empirical P(bonus rank < F) by position and source from recorded ranks, plus a power law."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from calibration.errors import ConfigError
from calibration.fit_acceptance import RunRounds, _seq_values
from calibration.hits import SOURCES, HitCurve

DEFAULT_TOP_N = 64  # the executor records ranks among the draft's top 64 (-1 beyond); meta["top_n"] overrides
SHRINK = 10  # a position's table is shrunk toward the pooled one as if it had this many pooled samples more


def collect_ranks(run: RunRounds) -> dict[str, list[tuple[int, int, bool, int]]]:
    """{"primary"|"backup"|"fast": [(accepted length, bonus rank, all K accepted, K), ...]} for sequence-rounds
    with a recorded rank. After a rejection the bonus comes from the residual (the sent token excluded); after
    all K were accepted it comes from the target's next-token distribution: a different, easier regime.
    A fast-backup run's backup rows are "fast": the n-gram's one-hot q leaves the residual the target's own
    distribution less one token, which the draft ranks far better than after its own rejected sample (mixed
    into "backup", 630 such rows made the neural backup's table optimistic at T = 0.7, session 30)."""
    out: dict[str, list[tuple[int, int, bool, int]]] = {src: [] for src in SOURCES}
    after_miss = "fast" if run.mode == "ssd" and run.backup == "fast" else "backup"
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
            out[after_miss if b else "primary"].append((int(a), int(rk), int(a) >= run.k, run.k))
    return out


def hit_table(pairs: list[tuple], top_n: int) -> np.ndarray:
    """hit[F] = P(0 <= rank < F) for F = 0..top_n (ranks -1 or >= top_n count as misses)."""
    r = np.asarray([p[1] for p in pairs], dtype=int)
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


def _shrunk(pairs: list[tuple], top_n: int, prior: np.ndarray) -> np.ndarray:
    n = len(pairs)
    own = hit_table(pairs, top_n) if n else prior
    return (n * own + SHRINK * prior) / (n + SHRINK)


def fit_source(pairs: list[tuple[int, int, bool, int]], top_n: int, k_max: int | None = None,
               final_prior: np.ndarray | None = None) -> tuple[dict, dict]:
    """HitCurve spec {"c", "r", "table", "final"?} for one (temperature, C, source) and its fit info.

    Table rows 0..k_max-1 (k_max: the largest SSD K of the group) come from rejection outcomes, each shrunk
    toward their pooled table. "final" is the all-accepted outcome (k = K) of every run, whatever its K:
    the bonus then comes from the target's next-token distribution after the whole speculation, so configs
    at any K read it (shrunk toward `final_prior`, the temperature's all-accepted table over both sources,
    when given). The power law is fitted to all outcomes pooled.
    """
    pooled = hit_table(pairs, top_n)
    rej = [p for p in pairs if not p[2]]
    fin = [p for p in pairs if p[2]]
    pooled_rej = hit_table(rej, top_n) if rej else pooled
    last = max(max((p[0] for p in rej), default=0), (k_max or 1) - 1)
    table = [_shrunk([p for p in rej if p[0] == k], top_n, pooled_rej) for k in range(last + 1)]
    law = fit_power_law(pooled, len(pairs))
    spec = {"c": law["c"], "r": law["r"], "table": [[float(v) for v in row] for row in table]}
    if final_prior is not None:
        spec["final"] = [float(v) for v in _shrunk(fin, top_n, final_prior)]
    elif fin:
        spec["final"] = [float(v) for v in hit_table(fin, top_n)]
    info = {**law, "n": len(pairs), "top_n": top_n,
            "samples_by_position": [sum(1 for p in rej if p[0] == k) for k in range(last + 1)],
            "final_n": len(fin), "final_ks": sorted({p[3] for p in fin}), "pooled_hit": [float(v) for v in pooled],
            "rejection_hit": [float(v) for v in pooled_rej],
            "final_hit": [float(v) for v in hit_table(fin, top_n)] if fin else None}
    return spec, info


def fit_hits(runs: list[RunRounds]) -> tuple[HitCurve, dict]:
    """Hit curves per temperature (largest C there) for primary, neural backup and fast backup (where runs
    had one), each with its all-accepted entry, and a miss multiplier per lower C."""
    groups: dict[float, dict[float, list[RunRounds]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.mode != "ar":
            groups[float(r.temperature)][float(r.sampler_c)].append(r)
    by_t, info_t = {}, {}
    ratios: dict[float, list[tuple[float, int]]] = defaultdict(list)
    for t, by_c in sorted(groups.items()):
        fitted = {}
        for c, rs in by_c.items():
            pairs = {src: [] for src in SOURCES}
            for r in rs:
                for src, ps in collect_ranks(r).items():
                    pairs[src] += ps
            if not pairs["primary"]:
                continue
            # at T > 0 the neural backup's table is fitted on the primary's rows too (both are speculations the
            # draft sampled from the true prefix): at T = 0 the calibration runs see the greedy contexts the real
            # runs will, so a source's own rows are nearly in-sample; at T > 0 they are a random ~20 rows per
            # position, whose noise swamps the sources' difference. Held out over sessions 25-29 (bench/cpu_results/
            # 2026-12-07-session30): at T = 0.7 the backup's own table predicted hit 0.853 where 0.758 was measured,
            # pooled 0.761; at T = 0 pooling would have cost 0.04 of bias (0.866 vs 0.904; 0.944 measured)
            if t > 0:
                pairs["backup"] = pairs["backup"] + pairs["primary"]
            ranks = [p[1] for ps in pairs.values() for p in ps]
            top_n = min((r.top_n for r in rs if r.top_n), default=max(DEFAULT_TOP_N, max(ranks) + 1))
            k_max = max((r.k for r in rs if r.mode == "ssd"), default=None)
            fin = [p for ps in pairs.values() for p in ps if p[2]]
            prior = hit_table(fin, top_n) if fin else None  # all accepted: one regime for both sources
            fitted[c] = {src: fit_source(ps, top_n, k_max, prior) for src, ps in pairs.items() if ps}
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
