"""Pure helpers of the load-fidelity benchmark (bench_load.py): the three load levels from the simulator's
capacities, predicted-vs-measured rows with relative errors, the repeats' spread as the noise floor and the error
beyond it, target counts, and the SD-vs-SSD crossover on either side."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from bench.fidelity_stats import noise_floor, repeat_spread
from calibration.errors import ConfigError

METRICS = ("tpot_p50_s", "tpot_p99_s", "throughput")
TARGETS = {"tpot_p50_s": 0.10, "tpot_p99_s": 0.20, "throughput": 0.10}   # issue 16's fidelity targets
LEVELS = ("light", "knee", "overloaded")


def load_levels(capacity_qps: Mapping[str, float], fractions: Sequence[float] = (0.3, 1.0, 1.5)) -> dict[str, float]:
    """Offered loads (requests/s): light = f0 x the smallest mode capacity (every mode keeps up), knee = f1 x
    the median capacity, overloaded = f2 x the largest (every mode falls behind)."""
    caps = [c for c in capacity_qps.values() if c > 0 and math.isfinite(c)]
    if not caps:
        raise ConfigError("capacity_qps", f"no positive finite capacity in {dict(capacity_qps)}", "capacities > 0")
    if len(fractions) != 3 or any(f <= 0 for f in fractions):
        raise ConfigError("--fractions", f"got {list(fractions)}", "three positive numbers: light, knee, overloaded")
    return {"light": fractions[0] * min(caps), "knee": fractions[1] * float(np.median(caps)),
            "overloaded": fractions[2] * max(caps)}


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    """(predicted - measured) / measured, None when either is missing or measured is not positive."""
    if predicted is None or measured is None or not math.isfinite(predicted) or not measured > 0:
        return None
    return (predicted - measured) / measured


def beyond_repeats(predicted: float | None, repeats: Sequence[float], measured: float | None) -> float | None:
    """The error noise cannot explain: 0 when ``predicted`` lies inside the repeats' range, else its distance to
    the nearest repeat relative to ``measured`` (their median; the same scale as ``rel_error``). None when any
    is missing or not finite."""
    v = [x for x in repeats if x is not None and math.isfinite(x)]
    if (predicted is None or not math.isfinite(predicted) or not v or len(v) < len(repeats) or measured is None
            or not measured > 0):
        return None
    return max(0.0, min(v) - predicted, predicted - max(v)) / measured


def _verdicts(metric: str, predicted: float | None, measured: float | None, repeats: Sequence[float]) -> dict:
    err = rel_error(predicted, measured)
    beyond = beyond_repeats(predicted, repeats, measured) if repeats else None
    return {"predicted": predicted, "rel_error": err,
            "within_target": None if err is None else abs(err) <= TARGETS[metric],
            "beyond_noise": beyond, "within_target_beyond_noise": None if beyond is None else beyond <= TARGETS[metric]}


def compare_row(mode: str, level: str, qps: float, predicted: Mapping, measured: Mapping, spread: Mapping,
                repeats: Sequence[Mapping] = (), adjusted: Mapping | None = None, drift: float | None = None,
                round_adjusted: Mapping | None = None, round_speed: float | None = None,
                hour_drift: Mapping | None = None) -> dict:
    """One (mode, load) row: predicted, measured (median of ``repeats``), relative errors, the repeats' spread
    and range (the noise floor of this cell), the error beyond that range, whether each error is within issue
    16's target plainly and beyond noise, and the same for the ``adjusted`` (drift-adjusted: the speed probe's)
    and ``round_adjusted`` (at the speed the runs' own rounds ran: a diagnostic of the load model alone)
    predictions, and the ``hour_drift`` one (the profile's drift series replaced by the one of the benchmark's own
    calibration runs right before the measurement)."""
    row: dict = {"mode": mode, "level": level, "qps": qps, "drift": drift, "round_speed": round_speed}
    for m in METRICS:
        vals = [r.get(m) for r in repeats]
        finite = [x for x in vals if x is not None and math.isfinite(x)]
        row[m] = {**_verdicts(m, predicted.get(m), measured.get(m), vals), "measured": measured.get(m),
                  "spread": spread.get(m), "range": [min(finite), max(finite)] if finite else None}
        for side, pred in (("drift_adjusted", adjusted), ("round_adjusted", round_adjusted),
                           ("hour_drift", hour_drift)):
            if pred is not None:
                row[m][side] = _verdicts(m, pred.get(m), measured.get(m), vals)
    return row


def target_counts(rows: Sequence[Mapping]) -> dict:
    """Targets met over rows x metrics: plainly and beyond noise, for the plain and (where rows carry them) the
    drift- and round-adjusted predictions; each as {"met", "of"} (cells without a verdict left out), per metric too."""
    def count(cells: list) -> dict:
        known = [c for c in cells if c is not None]
        return {"met": sum(known), "of": len(known)}

    out: dict = {}
    for side in ("plain", "drift_adjusted", "round_adjusted", "hour_drift"):
        cells = {m: [r[m] if side == "plain" else r[m].get(side) for r in rows] for m in METRICS}
        if side != "plain" and all(c is None for cs in cells.values() for c in cs):
            continue
        for key in ("within_target", "within_target_beyond_noise"):
            name = side if key == "within_target" else f"{side}_beyond_noise"
            per = {m: count([c and c[key] for c in cs]) for m, cs in cells.items()}
            out[name] = {"met": sum(p["met"] for p in per.values()), "of": sum(p["of"] for p in per.values()),
                         "by_metric": per}
    return out


def noise_floors(rows: Sequence[Mapping]) -> dict:
    """Per metric, the median and worst repeat spread over the (mode, load) cells (fidelity_stats.noise_floor)."""
    return {m: noise_floor({f"{r['mode']} {r['level']}": r[m]["spread"] for r in rows if r[m]["spread"] is not None})
            for m in METRICS}


def winners(rows: Sequence[Mapping], side: str, a: str = "sd", b: str = "ssd", metric: str = "tpot_p99_s") -> list:
    """Per load level (in qps order), which of modes a, b has the lower ``metric`` on ``side`` (predicted or
    measured); None where either is missing."""
    by = {(r["level"], r["mode"]): r for r in rows}
    levels = sorted({(r["qps"], r["level"]) for r in rows})
    out = []
    for qps, lvl in levels:
        ra, rb = by.get((lvl, a)), by.get((lvl, b))
        va = None if ra is None else ra[metric][side]
        vb = None if rb is None else rb[metric][side]
        out.append({"level": lvl, "qps": qps, "winner": None if va is None or vb is None else (a if va <= vb else b),
                    "ratio": None if va is None or vb is None or va <= 0 else vb / va})
        if side == "measured" and ra is not None and rb is not None:
            out[-1]["paired"] = paired_sign(ra.get("repeats") or [], rb.get("repeats") or [], metric)
    return out


SIGN_ALPHA = 0.05


def paired_sign(reps_a: Sequence[Mapping], reps_b: Sequence[Mapping], metric: str) -> dict | None:
    """The two modes' repeats at one level paired by pass (bench_load interleaves every cell once per pass): in
    how many pairs b is lower, and the two-sided sign test's p. Why: the measured winner is the lower median, and
    with repeats spreading 20-70% a 6% difference of medians names a winner that the repeats do not support; 7
    pairs reach p < 0.05 only at 7/7 or 0/7 (power ~0.6 at a true 85% share), so "not significant" is no tie."""
    from scipy.stats import binomtest

    pairs = [(x.get(metric), y.get(metric)) for x, y in zip(reps_a, reps_b)]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None and x != y]
    if not pairs:
        return None
    lower = sum(y < x for x, y in pairs)
    p = float(binomtest(lower, len(pairs), 0.5).pvalue)
    return {"b_lower": lower, "n": len(pairs), "p": p, "significant": p < SIGN_ALPHA}


def crossover_qps(per_level: Sequence[Mapping]) -> float | None:
    """The load where the ratio (b / a) crosses 1, linear in log ratio between the two levels that bracket it;
    None when the winner does not change over the levels."""
    pts = [(p["qps"], math.log(p["ratio"])) for p in per_level if p["ratio"] and p["ratio"] > 0]
    for (q0, y0), (q1, y1) in zip(pts, pts[1:]):
        if y0 == 0:
            return q0
        if y0 * y1 < 0:
            return q0 + (q1 - q0) * (-y0) / (y1 - y0)
    return pts[-1][0] if pts and pts[-1][1] == 0 else None


def crossover(rows: Sequence[Mapping], a: str = "sd", b: str = "ssd", metric: str = "tpot_p99_s") -> dict:
    """SD vs SSD on ``metric``: winners per level and the crossover load, predicted and measured, and whether
    the prediction puts every level on the same side of the crossover as the measurement."""
    pred, meas = winners(rows, "predicted", a, b, metric), winners(rows, "measured", a, b, metric)
    same = [p["winner"] == m["winner"] for p, m in zip(pred, meas) if p["winner"] and m["winner"]]
    sig = [p["winner"] == m["winner"] for p, m in zip(pred, meas)
           if p["winner"] and m["winner"] and (m.get("paired") or {}).get("significant")]
    return {"pair": f"{a} vs {b}", "metric": metric, "predicted": pred, "measured": meas,
            "predicted_qps": crossover_qps(pred), "measured_qps": crossover_qps(meas),
            "same_side": bool(same) and all(same), "levels_agreeing": f"{sum(same)}/{len(same)}",
            "significant_levels_agreeing": f"{sum(sig)}/{len(sig)}"}


def summarize(samples: Sequence[Mapping]) -> tuple[dict, dict]:
    """(median, relative spread (max - min) / median) per metric over repeats (None where a repeat lacks it;
    spread None where the median is not positive)."""
    med, spread = {}, {}
    for m in METRICS:
        v = [s.get(m) for s in samples]
        if not v or any(x is None or not math.isfinite(x) for x in v):
            med[m] = spread[m] = None
            continue
        med[m] = float(np.median(v))
        spread[m] = repeat_spread(v) if med[m] > 0 else None
    return med, spread
