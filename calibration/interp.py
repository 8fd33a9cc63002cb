"""Small lookup helpers shared by the acceptance and hit models (temperature keys, C multipliers)."""

from __future__ import annotations

import numpy as np

from calibration.errors import ConfigError, check_number


def temp_keys(table: dict, where: str) -> dict[float, object]:
    """Turn {"0.0": v} or {0.0: v} into {0.0: v}, validating the temperatures."""
    if not isinstance(table, dict) or not table:
        raise ConfigError(where, "must be a non-empty mapping temperature -> values", "{temperature: ...}")
    out = {}
    for k, v in table.items():
        try:
            t = float(k)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}[{k!r}]", "temperature key is not a number", "numbers >= 0") from None
        check_number(f"{where}[{k!r}]", t, 0.0, 10.0)
        out[t] = v
    return dict(sorted(out.items()))


def pick_temperature(table: dict[float, object], temperature: float) -> tuple[object, object, float]:
    """Neighbours (lo, hi) around temperature and the weight of hi, for linear interpolation."""
    ts = list(table)
    if temperature <= ts[0]:
        return table[ts[0]], table[ts[0]], 0.0
    if temperature >= ts[-1]:
        return table[ts[-1]], table[ts[-1]], 0.0
    i = int(np.searchsorted(ts, temperature))
    lo, hi = ts[i - 1], ts[i]
    return table[lo], table[hi], (temperature - lo) / (hi - lo)


def c_multiplier(c_effect: dict[float, float], sampler_c: float) -> float:
    """Multiplier at Saguaro constant C, interpolated in C; 1.0 at C = 1 and when nothing is known."""
    if not c_effect:
        return 1.0
    pts = dict(c_effect)
    pts.setdefault(1.0, 1.0)
    xs = sorted(pts)
    return float(np.interp(sampler_c, xs, [pts[x] for x in xs]))


def check_c_effect(c_effect: dict, where: str, hi: float | None = None) -> dict[float, float]:
    """Validate {C: multiplier} with C in [0, 1] and multiplier >= 0 (<= hi when given)."""
    if not isinstance(c_effect, dict | type(None)):
        raise ConfigError(where, f"must be an object, got {type(c_effect).__name__}", "{C: multiplier}")
    out = {}
    for k, v in (c_effect or {}).items():
        try:
            key = float(k)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}[{k!r}]", "key is not a number", "C in [0, 1]") from None
        c = check_number(f"{where}[{k!r}]", key, 0.0, 1.0)
        out[float(c)] = float(check_number(f"{where}[{k!r}]", v, 0.0, hi))
    return out
