"""Acceptance model: per-position conditional acceptance of draft tokens, by temperature and Saguaro C."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from calibration.errors import ConfigError, check_number
from calibration.interp import c_multiplier, check_c_effect, pick_temperature, temp_keys


@dataclass(frozen=True)
class AcceptanceModel:
    """rates[T] = (a_1, a_2, ...): P(token i accepted | tokens < i accepted); the last rate repeats.

    c_effect maps a Saguaro constant C to a multiplier on every rate (lower C: lower acceptance).
    by_k (optional, fitted): {T: {K: rates}} measured at several lookaheads K, since rates depend on K: long
    rounds consume easy text fast, so more of them start in hard text (greedy decoding of a small pair). A
    measured K reads its own table; a K between two measured ones blends their rates per position, weighted by
    distance in K, positions past the smaller table taken from the larger (a shorter table is not stretched:
    repeating its last rate put K = 3 and 4 at T = 0.7 10-16% high); below the smallest measured K its table,
    truncated; above the largest, the largest's.
    row_scale (optional, fitted): {T: (m_1, m_2, ...)} multipliers on the rates, one per calibration row
    (request): prompts differ (a tiny pair's greedy text loops on some), so the simulator gives each request
    one drawn from the nearest temperature's pool; empty = every row alike (the closed forms' assumption).
    """

    by_temperature: dict = field(default_factory=lambda: {0.0: (0.8,)})
    c_effect: dict = field(default_factory=dict)
    by_k: dict = field(default_factory=dict)
    row_scale: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        table = temp_keys(self.by_temperature, "acceptance.by_temperature")
        clean = {}
        for t, rates in table.items():
            if isinstance(rates, int | float):
                rates = [rates]
            if not isinstance(rates, list | tuple) or not rates:
                raise ConfigError(f"acceptance.by_temperature[{t}]", "must be a non-empty list of rates",
                                  "probabilities in [0, 1]")
            clean[t] = tuple(float(check_number(f"acceptance.by_temperature[{t}][{i}]", a, 0.0, 1.0))
                             for i, a in enumerate(rates))
        object.__setattr__(self, "by_temperature", clean)
        object.__setattr__(self, "c_effect", check_c_effect(self.c_effect, "acceptance.c_effect", hi=1.0))
        object.__setattr__(self, "by_k", _check_by_k(self.by_k))
        object.__setattr__(self, "row_scale", _check_row_scale(self.row_scale))

    @classmethod
    def geometric(cls, alpha: float, c_effect: dict | None = None) -> AcceptanceModel:
        """i.i.d. acceptance alpha at every position and temperature (the closed forms' assumption)."""
        check_number("alpha", alpha, 0.0, 1.0)
        return cls({0.0: (float(alpha),)}, c_effect or {})

    @classmethod
    def from_acceptance_length(cls, acceptance_length: float, k: int, c_effect: dict | None = None,
                               temperature: float = 0.0) -> AcceptanceModel:
        """Geometric model whose expected tokens per round at lookahead k (accepted + the bonus token) is
        `acceptance_length`: alpha solves (1 - alpha^(k+1)) / (1 - alpha) = acceptance_length."""
        check_number("k", k, 1, 64, integer=True)
        k = int(k)
        rng = f"(1, {k + 1}) for k = {k}"
        if isinstance(acceptance_length, bool) or not isinstance(acceptance_length, int | float):
            raise ConfigError("acceptance_length", f"expected a number, got {acceptance_length!r}", rng)
        if not 1.0 < acceptance_length < k + 1:  # also rejects NaN
            raise ConfigError("acceptance_length", f"{acceptance_length!r} is out of range", rng)
        from scipy.optimize import brentq  # here, not at the top: executor children import calibration
        alpha = brentq(lambda a: sum(a ** i for i in range(k + 1)) - acceptance_length, 0.0, 1.0, xtol=1e-14)
        return cls({float(temperature): (float(alpha),)}, c_effect or {})

    @classmethod
    def from_histogram(cls, counts: list[int], temperature: float = 0.0) -> AcceptanceModel:
        """From counts of accepted lengths 0..K at a fixed K: rate_i = P(len >= i) / P(len >= i-1)."""
        c = np.asarray(counts, dtype=float)
        if c.ndim != 1 or len(c) < 2 or (c < 0).any() or c.sum() <= 0:
            raise ConfigError("counts", "need non-negative counts for lengths 0..K (K >= 1), not all zero",
                              "list of K+1 counts")
        tail = c[::-1].cumsum()[::-1]  # tail[i] = #(len >= i)
        rates = [float(tail[i] / tail[i - 1]) if tail[i - 1] > 0 else 0.0 for i in range(1, len(c))]
        return cls({float(temperature): tuple(rates)})

    def rates(self, k: int, temperature: float = 0.0, sampler_c: float = 1.0, scale: float = 1.0) -> np.ndarray:
        """Conditional acceptance for positions 1..k (scale: one row's multiplier, see row_scale)."""
        table = {t: self._at_k(t, r, k) for t, r in self.by_temperature.items()}
        lo, hi, w = pick_temperature(table, temperature)
        a = (1 - w) * _expand(lo, k) + w * _expand(hi, k)
        return np.clip(a * c_multiplier(self.c_effect, sampler_c) * scale, 0.0, 1.0)

    def length_pmf(self, k: int, temperature: float = 0.0, sampler_c: float = 1.0, scale: float = 1.0
                   ) -> np.ndarray:
        """P(exactly j draft tokens accepted), j = 0..k."""
        a = self.rates(k, temperature, sampler_c, scale)
        surv = np.concatenate([[1.0], np.cumprod(a)])  # P(len >= j)
        pmf = surv.copy()
        pmf[:-1] -= surv[1:]
        return pmf

    def expected_tokens(self, k: int, temperature: float = 0.0, sampler_c: float = 1.0, scale: float = 1.0
                        ) -> float:
        """E[tokens per round] = E[accepted] + 1 (the bonus token)."""
        return float(np.dot(np.arange(k + 1) + 1, self.length_pmf(k, temperature, sampler_c, scale)))

    def mean_alpha(self, k: int = 4, temperature: float = 0.0, sampler_c: float = 1.0) -> float:
        """Geometric-equivalent per-token acceptance (mean of the first k rates)."""
        return float(np.mean(self.rates(k, temperature, sampler_c)))

    def row_scales(self, temperature: float) -> tuple[float, ...]:
        """The fitted per-row multipliers at the nearest fitted temperature; () when rows are alike."""
        if not self.row_scale:
            return ()
        return self.row_scale[min(self.row_scale, key=lambda t: (abs(t - temperature), t))]

    def _at_k(self, t: float, default: tuple[float, ...], k: int) -> tuple[float, ...]:
        """The rates at temperature t for lookahead k from by_k (see the class docstring), else default."""
        ks = self.by_k.get(t)
        if not ks:
            return default
        below, above = [kk for kk in ks if kk <= k], [kk for kk in ks if kk >= k]
        if not below or not above:  # outside the measured range: the nearest end's table
            return ks[min(above) if above else max(ks)]
        lo, hi = max(below), min(above)
        if lo == hi:
            return ks[lo]
        return _blend(ks[lo], ks[hi], (k - lo) / (hi - lo))

    def to_dict(self) -> dict:
        d = {"by_temperature": {str(t): list(r) for t, r in self.by_temperature.items()},
             "c_effect": {str(c): m for c, m in self.c_effect.items()}}
        if self.by_k:       # written only when fitted (older profiles have none)
            d["by_k"] = {str(t): {str(k): list(r) for k, r in ks.items()} for t, ks in self.by_k.items()}
        if self.row_scale:  # likewise
            d["row_scale"] = {str(t): list(m) for t, m in self.row_scale.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> AcceptanceModel:
        if not isinstance(d, dict) or "by_temperature" not in d:
            raise ConfigError("acceptance", "must be an object with 'by_temperature'", "{by_temperature, c_effect}")
        return cls(d["by_temperature"], d.get("c_effect", {}), d.get("by_k", {}), d.get("row_scale", {}))


def _check_row_scale(row_scale: object) -> dict[float, tuple[float, ...]]:
    """Validate {T: [multipliers]} (each in [0, 100]); {} when empty."""
    if not row_scale:
        return {}
    out = {}
    for t, ms in temp_keys(row_scale, "acceptance.row_scale").items():
        if not isinstance(ms, list | tuple) or not ms:
            raise ConfigError(f"acceptance.row_scale[{t}]", "must be a non-empty list of multipliers",
                              "numbers in [0, 100]")
        out[t] = tuple(float(check_number(f"acceptance.row_scale[{t}][{i}]", m, 0.0, 100.0))
                       for i, m in enumerate(ms))
    return out


def _check_by_k(by_k: object) -> dict[float, dict[int, tuple[float, ...]]]:
    """Validate {T: {K: rates}} (K an integer >= 1, rates probabilities); {} when empty."""
    if not by_k:
        return {}
    out = {}
    for t, ks in temp_keys(by_k, "acceptance.by_k").items():
        if not isinstance(ks, dict) or not ks:
            raise ConfigError(f"acceptance.by_k[{t}]", "must be a non-empty mapping K -> rates", "{K: [rates]}")
        clean = {}
        for k, rates in ks.items():
            kk = int(check_number(f"acceptance.by_k[{t}] key", float(k) if str(k).isdigit() else -1, 1, 64))
            if not isinstance(rates, list | tuple) or not rates:
                raise ConfigError(f"acceptance.by_k[{t}][{k}]", "must be a non-empty list of rates",
                                  "probabilities in [0, 1]")
            clean[kk] = tuple(float(check_number(f"acceptance.by_k[{t}][{k}][{i}]", a, 0.0, 1.0))
                              for i, a in enumerate(rates))
        out[t] = dict(sorted(clean.items()))
    return out


def _blend(lo: tuple[float, ...], hi: tuple[float, ...], w: float) -> tuple[float, ...]:
    """(1 - w) * lo + w * hi per position; positions past lo's table are hi's alone (hi's last rate repeats)."""
    h = _expand(hi, max(len(lo), len(hi)))
    return tuple(float((1 - w) * lo[i] + w * h[i]) if i < len(lo) else float(h[i]) for i in range(len(h)))


def _expand(rates: tuple[float, ...], k: int) -> np.ndarray:
    r = list(rates[:k]) + [rates[-1]] * max(0, k - len(rates))
    return np.asarray(r, dtype=float)
