"""Hit curve: P(the verifier's bonus token is among the draft's top-F candidates) by position and source."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from calibration.errors import ConfigError, check_number
from calibration.interp import c_multiplier, check_c_effect, pick_temperature, temp_keys

SOURCES = ("primary", "backup", "fast")


@dataclass(frozen=True)
class HitCurve:
    """miss(F) = c * F^(-r) (Definition 11), or an empirical table hit[position][F] with a power-law tail.

    by_temperature[T][source] = {"c", "r", optional "table": [[hit(F=0..N)] per accepted length k],
    optional "final": [hit(F=0..N)]}; source "primary" is a speculation built by the primary speculator,
    "backup" one built after a miss by the neural backup, "fast" (optional; else "backup") one by the fast
    (n-gram) backup: its one-hot q leaves a residual the draft's candidates rank far better after a rejection
    (deep pair, T = 0.7, position 0: the bonus was the top candidate 54% of the time, 31% after a neural one).
    "table" rows are for rejections at position k (the bonus comes from the residual); "final" is the all-accepted outcome k = K (the bonus comes from the target's next-token
    distribution after the whole speculation: a different, easier regime), read when the caller passes the
    lookahead k. Without "final" the table row (or power law) at position K is used.
    c_effect maps Saguaro C to a multiplier on the miss probability (lower C: fewer misses).
    """

    by_temperature: dict = field(default_factory=lambda: {0.0: {"primary": {"c": 0.3, "r": 0.5}}})
    c_effect: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        table = temp_keys(self.by_temperature, "hits.by_temperature")
        clean = {}
        for t, by_src in table.items():
            if not isinstance(by_src, dict) or "primary" not in by_src:
                raise ConfigError(f"hits.by_temperature[{t}]", "needs a 'primary' entry", "{primary, backup?}")
            clean[t] = {}
            for src, spec in by_src.items():
                if src not in SOURCES:
                    raise ConfigError(f"hits.by_temperature[{t}].{src}", "unknown source", " | ".join(SOURCES))
                clean[t][src] = _check_spec(spec, f"hits.by_temperature[{t}].{src}")
            clean[t].setdefault("backup", clean[t]["primary"])
        object.__setattr__(self, "by_temperature", clean)
        object.__setattr__(self, "c_effect", check_c_effect(self.c_effect, "hits.c_effect"))

    @classmethod
    def power_law(cls, c: float, r: float, c_backup: float | None = None, r_backup: float | None = None,
                  c_effect: dict | None = None) -> HitCurve:
        """miss(F) = min(1, c F^-r) at every position; optionally a different law for backup speculations."""
        primary = {"c": c, "r": r}
        backup = {"c": c if c_backup is None else c_backup, "r": r if r_backup is None else r_backup}
        return cls({0.0: {"primary": primary, "backup": backup}}, c_effect or {})

    def miss(self, fanout: float, position: int = 0, temperature: float = 0.0, backup: bool = False,
             sampler_c: float = 1.0, k: int | None = None, fast: bool = False) -> float:
        """P(bonus token not cached) when `fanout` candidates are cached at accepted length `position`;
        with the lookahead k given, position k (all accepted) reads the all-accepted entry when there is one.
        ``fast``: a backup speculation came from the fast backup (the "fast" source where fitted)."""
        if fanout <= 0:
            return 1.0
        src = ("fast" if fast else "backup") if backup else "primary"
        final = k is not None and position >= k
        lo, hi, w = pick_temperature(self.by_temperature, temperature)
        m = (1 - w) * _miss(lo.get(src, lo["backup"]), fanout, position, final) \
            + w * _miss(hi.get(src, hi["backup"]), fanout, position, final)
        return float(min(1.0, max(0.0, m * c_multiplier(self.c_effect, sampler_c))))

    def hit(self, fanout: float, position: int = 0, temperature: float = 0.0, backup: bool = False,
            sampler_c: float = 1.0, k: int | None = None, fast: bool = False) -> float:
        """1 - miss."""
        return 1.0 - self.miss(fanout, position, temperature, backup, sampler_c, k, fast)

    def to_dict(self) -> dict:
        return {"by_temperature": {str(t): v for t, v in self.by_temperature.items()},
                "c_effect": {str(c): m for c, m in self.c_effect.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> HitCurve:
        if not isinstance(d, dict) or "by_temperature" not in d:
            raise ConfigError("hits", "must be an object with 'by_temperature'", "{by_temperature, c_effect}")
        return cls(d["by_temperature"], d.get("c_effect", {}))


def _check_spec(spec: object, where: str) -> dict:
    if not isinstance(spec, dict) or "c" not in spec or "r" not in spec:
        raise ConfigError(where, "needs power-law 'c' and 'r'", "{c >= 0, r >= 0, table?, final?}")
    out = {"c": float(check_number(f"{where}.c", spec["c"], 0.0, 10.0)),
           "r": float(check_number(f"{where}.r", spec["r"], 0.0, 10.0))}
    if spec.get("table") is not None:
        table = spec["table"]
        if not isinstance(table, list | tuple) or not all(isinstance(row, list | tuple) for row in table):
            raise ConfigError(f"{where}.table", "must be a list of rows (one per position)",
                              "[[hit rate by fan-out 0, 1, ...], ...]")
        out["table"] = [_check_row(row, f"{where}.table[{k}]") for k, row in enumerate(table)]
    if spec.get("final") is not None:
        if not isinstance(spec["final"], list | tuple) or not spec["final"]:
            raise ConfigError(f"{where}.final", "must be one non-empty row", "[hit rate by fan-out 0, 1, ...]")
        out["final"] = _check_row(spec["final"], f"{where}.final")
    return out


def _check_row(row: list | tuple, where: str) -> list[float]:
    arr = [float(check_number(f"{where}[{f}]", h, 0.0, 1.0)) for f, h in enumerate(row)]
    if any(b < a - 1e-12 for a, b in zip(arr, arr[1:])):
        raise ConfigError(where, "hit rate must not decrease with fan-out", "non-decreasing values in [0, 1]")
    return arr


def _miss(spec: dict, fanout: float, position: int, final: bool = False) -> float:
    law = min(1.0, spec["c"] * fanout ** (-spec["r"]))
    row = spec.get("final") if final else None
    if row:  # the all-accepted entry; beyond its last fan-out the hit rate stays at least its last value
        if fanout <= len(row) - 1:
            return 1.0 - float(np.interp(fanout, np.arange(len(row)), row))
        return min(law, 1.0 - row[-1])
    table = spec.get("table")
    if table:
        row = table[min(position, len(table) - 1)]
        if fanout <= len(row) - 1:
            return 1.0 - float(np.interp(fanout, np.arange(len(row)), row))
    return law
