"""Pure helpers of the fidelity benchmark's measurement method: interleaved run order, per-config repeat
summaries (medians), the noise floor of the same run, and errors beyond that noise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from calibration.errors import ConfigError, check_number


def interleaved_order(first: Sequence[str], rest: Sequence[str], repeats: int, seed: int = 0) -> list[list[str]]:
    """Run order, one list per pass: every config once per pass (round-robin), shuffled with the fixed seed
    seed + pass. Pass 0 runs `first` (the calibration configs, needed before the rest can be pinned) before
    `rest`; later passes shuffle all configs together, so drifting load hits them alike."""
    check_number("repeats", repeats, 1, 1000, integer=True)
    names = list(first) + list(rest)
    if len(set(names)) != len(names):
        raise ConfigError("configs", "config names must be unique", "distinct names")
    passes = []
    for i in range(repeats):
        rng = np.random.default_rng(seed + i)
        if i == 0:
            passes.append([first[j] for j in rng.permutation(len(first))] +
                          [rest[j] for j in rng.permutation(len(rest))])
        else:
            passes.append([names[j] for j in rng.permutation(len(names))])
    return passes


def repeat_spread(values: Sequence[float]) -> float:
    """Relative spread of one config's repeats: (max - min) / median (0 for a single repeat)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or not np.all(np.isfinite(v)) or np.median(v) <= 0:
        raise ConfigError("repeats", f"need positive finite measurements, got {list(values)}", "values > 0")
    return float((v.max() - v.min()) / np.median(v))


def median_of(repeats: Sequence[Mapping]) -> dict:
    """Per-key median over repeats of dicts with the same keys (None where any repeat has None)."""
    if not repeats:
        raise ConfigError("repeats", "no repeats to summarise", "one or more measurements")
    out = {}
    for key in repeats[0]:
        vals = [r.get(key) for r in repeats]
        out[key] = None if any(v is None for v in vals) else float(np.median(vals))
    return out


def beyond_noise(rel_error: float, spread: float) -> float:
    """|error| minus the config's own repeat spread, floored at 0: the part noise cannot explain."""
    return max(0.0, abs(rel_error) - spread)


def speed_drift(probes: Sequence[float | None], reference: Sequence[float | None]) -> float | None:
    """Median speed probe (seconds of a fixed workload, bench.machine_speed.speed_probe) of a config's runs over the
    reference runs' (> 1: the machine was slower then); None when either side lacks a probe."""
    if not probes or not reference or None in probes or None in reference:
        return None
    return float(np.median(probes) / np.median(reference))


def noise_floor(spreads: Mapping[str, float]) -> dict:
    """Median and worst repeat spread over configs (the accuracy no prediction can beat in this run)."""
    if not spreads:
        return {"n": 0, "median_spread": None, "max_spread": None, "worst": None}
    names = list(spreads)
    v = np.asarray([spreads[n] for n in names])
    return {"n": len(v), "median_spread": float(np.median(v)), "max_spread": float(v.max()),
            "worst": names[int(v.argmax())]}


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (ranks by argsort: no ties expected in timings)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def error_summary(rows: Sequence[Mapping]) -> dict:
    """Tokens/s errors next to the noise floor, errors beyond noise, tokens/round and hit-rate errors.

    rows: {"name", "rel_error", "spread", "predicted", "measured"} (predicted/measured: tokens_per_s,
    tokens_per_round, hit_rate)."""
    if not rows:
        raise ConfigError("rows", "no configs to summarise", "one or more compared configs")
    errs = np.abs([r["rel_error"] for r in rows])
    beyond = np.asarray([beyond_noise(r["rel_error"], r["spread"]) for r in rows])
    tpr = np.abs([r["predicted"]["tokens_per_round"] / r["measured"]["tokens_per_round"] - 1 for r in rows])
    hits = [abs(r["predicted"]["hit_rate"] - r["measured"]["hit_rate"]) for r in rows
            if r["predicted"].get("hit_rate") is not None and r["measured"].get("hit_rate") is not None]
    return {"configs": len(rows), "median_abs_rel_error": float(np.median(errs)), "max_abs_rel_error": float(errs.max()),
            "worst": rows[int(errs.argmax())]["name"],
            "spearman": spearman([r["predicted"]["tokens_per_s"] for r in rows],
                                 [r["measured"]["tokens_per_s"] for r in rows]),
            "noise_floor": noise_floor({r["name"]: r["spread"] for r in rows}),
            "median_beyond_noise": float(np.median(beyond)), "max_beyond_noise": float(beyond.max()),
            "worst_beyond_noise": rows[int(beyond.argmax())]["name"],
            "tokens_per_round_median_rel_error": float(np.median(tpr)), "tokens_per_round_max_rel_error": float(tpr.max()),
            "hit_rate_median_abs_error": float(np.median(hits)) if hits else None,
            "hit_rate_max_abs_error": float(max(hits)) if hits else None}
