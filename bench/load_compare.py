"""Pure helpers of the load-fidelity benchmark (bench_load.py): the three load levels from the simulator's
capacities, predicted-vs-measured rows with relative errors, and the SD-vs-SSD crossover on either side."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

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


def compare_row(mode: str, level: str, qps: float, predicted: Mapping, measured: Mapping, spread: Mapping) -> dict:
    """One (mode, load) row: predicted, measured (median of repeats), relative errors, repeat spread, and
    whether each error is within issue 16's target."""
    row: dict = {"mode": mode, "level": level, "qps": qps}
    for m in METRICS:
        err = rel_error(predicted.get(m), measured.get(m))
        row[m] = {"predicted": predicted.get(m), "measured": measured.get(m), "rel_error": err,
                  "spread": spread.get(m), "within_target": None if err is None else abs(err) <= TARGETS[m]}
    return row


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
    return out


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
    return {"pair": f"{a} vs {b}", "metric": metric, "predicted": pred, "measured": meas,
            "predicted_qps": crossover_qps(pred), "measured_qps": crossover_qps(meas),
            "same_side": bool(same) and all(same), "levels_agreeing": f"{sum(same)}/{len(same)}"}


def summarize(samples: Sequence[Mapping]) -> tuple[dict, dict]:
    """(median, relative spread (max - min) / median) per metric over repeats (None where a repeat lacks it)."""
    med, spread = {}, {}
    for m in METRICS:
        v = [s.get(m) for s in samples]
        if not v or any(x is None or not math.isfinite(x) for x in v):
            med[m] = spread[m] = None
            continue
        a = np.asarray(v, dtype=float)
        med[m] = float(np.median(a))
        spread[m] = float((a.max() - a.min()) / med[m]) if med[m] > 0 else None
    return med, spread
