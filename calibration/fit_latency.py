"""Latency fit: linear vs piecewise-linear in total tokens (+ a context term), chosen by cross-validation
(executor overheads and message times from real runs: calibration/fit_executor.py)."""

from __future__ import annotations

from itertools import combinations

import numpy as np

from calibration.errors import ConfigError
from calibration.latency import LatencyModel
from calibration.repeats import MIN_REPEATS_TO_TRIM, trimmed_mean

MAX_KNOT_CANDIDATES = 8
# one-standard-error rule: the simplest form whose CV error is within one standard error of the best wins


def pool_repeats(rows: list[dict]) -> list[dict]:
    """Rows of one shape (who, batch, new tokens, context) seen in at least MIN_REPEATS_TO_TRIM grids (repeated
    passes of a benchmark) each take the trimmed mean of their times (calibration/repeats.py). The count of
    rows, hence the weights, is unchanged; malformed rows are left for ``latency_arrays`` to name."""
    key = lambda r: (r.get("who"), r.get("batch"), r.get("new_tokens"), r.get("context", 0))  # noqa: E731
    groups: dict = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    pooled = {k: trimmed_mean([float(r["median_s"]) for r in g]) for k, g in groups.items()
              if len(g) >= MIN_REPEATS_TO_TRIM and all(_positive(r.get("median_s")) for r in g)}
    return [{**r, "median_s": pooled[key(r)]} if key(r) in pooled else r for r in rows]


def _positive(v: object) -> bool:
    try:
        return float(v) > 0
    except (TypeError, ValueError):
        return False


def latency_arrays(rows: list[dict], where: str = "latency") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens = batch*new_tokens, batch*context, median seconds) from latency rows, validated."""
    if not rows:
        raise ConfigError(where, "no latency rows to fit", "rows with batch, new_tokens, context, median_s")
    xs, zs, ys = [], [], []
    for i, r in enumerate(rows):
        try:
            b, n, c, y = int(r["batch"]), int(r["new_tokens"]), float(r.get("context", 0)), float(r["median_s"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{where}[{i}]", f"malformed row ({e})", "batch, new_tokens, context, median_s") from None
        if b < 1 or n < 1 or c < 0 or not y > 0:
            raise ConfigError(f"{where}[{i}]", f"bad values batch={b} new_tokens={n} context={c} median_s={y}",
                              "batch >= 1, new_tokens >= 1, context >= 0, median_s > 0")
        xs.append(b * n)
        zs.append(b * c)
        ys.append(y)
    return np.asarray(xs, float), np.asarray(zs, float), np.asarray(ys, float)


def _design(x: np.ndarray, z: np.ndarray, knots: tuple[float, ...]) -> np.ndarray:
    cols = [np.ones_like(x), x] + [np.maximum(0.0, x - k) for k in knots] + [z]
    return np.stack(cols, axis=1)


def _fit_one(x: np.ndarray, z: np.ndarray, y: np.ndarray, knots: tuple[float, ...]) -> LatencyModel:
    """Least squares on relative error; linear coefficients >= 0, hinge slopes free, per_context >= 0."""
    from scipy.optimize import lsq_linear  # imported here: `import calibration` stays fast
    a = _design(x, z, knots) / y[:, None]
    lo = np.full(a.shape[1], -np.inf)
    lo[-1] = 0.0
    if not knots:
        lo[:] = 0.0
    keep = np.linalg.norm(a, axis=0) > 0  # a hinge beyond every training point has nothing to fit
    coef = np.zeros(a.shape[1])
    coef[keep] = lsq_linear(a[:, keep], np.ones_like(y), bounds=(lo[keep], np.full(int(keep.sum()), np.inf))).x
    per_context = float(max(0.0, coef[-1]))
    if not knots:
        return LatencyModel.linear(base=float(coef[0]), per_token=float(coef[1]), per_context=per_context)
    kx = sorted({float(x.min()), *knots, float(x.max())})
    basis = _design(np.asarray(kx), np.zeros(len(kx)), knots)
    ky = np.maximum(0.0, basis @ coef)
    return LatencyModel.piecewise(kx, [float(v) for v in ky], per_context=per_context)


def _predict(model: LatencyModel, x: np.ndarray, z: np.ndarray) -> np.ndarray:
    # batch=1 with new_tokens=x and context=z gives exactly the forms' inputs (batch*new, batch*context)
    return np.asarray([model(1, xi, zi) for xi, zi in zip(x, z)])


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - y) / y))


def _folds(n: int, k: int = 5, seed: int = 0) -> list[np.ndarray]:
    idx = np.random.default_rng(seed).permutation(n)
    if n < 2 * k:
        return [np.array([i]) for i in idx]  # leave-one-out for small grids
    return [idx[i::k] for i in range(k)]


def cv_errors(x: np.ndarray, z: np.ndarray, y: np.ndarray, knots: tuple[float, ...]) -> np.ndarray:
    """Held-out absolute relative errors of one form (5-fold, leave-one-out when the grid is small)."""
    errs = []
    for test in _folds(len(y)):
        train = np.setdiff1d(np.arange(len(y)), test)
        if len(train) < len(knots) + 3:
            continue
        m = _fit_one(x[train], z[train], y[train], knots)
        errs.append(np.abs(_predict(m, x[test], z[test]) - y[test]) / y[test])
    return np.concatenate(errs) if errs else np.array([np.inf])


def cv_mape(x: np.ndarray, z: np.ndarray, y: np.ndarray, knots: tuple[float, ...]) -> float:
    """Mean absolute percentage error of the form on held-out folds."""
    return float(np.mean(cv_errors(x, z, y, knots)))


def knot_candidates(x: np.ndarray) -> list[float]:
    """Interior distinct token counts, thinned to at most MAX_KNOT_CANDIDATES (geometric spacing)."""
    inner = np.unique(x)[1:-1]
    if len(inner) <= MAX_KNOT_CANDIDATES:
        return [float(v) for v in inner]
    pick = np.unique(np.round(np.geomspace(1, len(inner), MAX_KNOT_CANDIDATES)).astype(int) - 1)
    return [float(inner[i]) for i in pick]


def fit_latency(rows: list[dict], where: str = "latency", max_knots: int = 2) -> tuple[LatencyModel, dict]:
    """Fit one model's latency grid; returns the chosen model and {"form", "knots", "cv_mape", "mape", "n"}."""
    x, z, y = latency_arrays(rows, where)
    if len(y) < 3 or len(np.unique(x)) < 2:
        model = _fit_one(x, z, y, ())
        return model, {"form": "linear", "knots": [], "cv_mape": None, "mape": _mape(_predict(model, x, z), y),
                       "n": int(len(y)), "candidates": 1}
    cands = knot_candidates(x)
    forms: list[tuple[float, ...]] = [()]
    for m in range(1, max_knots + 1):
        forms += list(combinations(cands, m))
    errs = [(cv_errors(x, z, y, kn), kn) for kn in forms]
    scores = [(float(np.mean(e)), kn) for e, kn in errs]
    i_best = int(np.argmin([s for s, _ in scores]))
    e_best = errs[i_best][0]
    limit = scores[i_best][0] + float(np.std(e_best) / np.sqrt(len(e_best)))
    ok = [(len(kn), s, kn) for s, kn in scores if s <= limit + 1e-12]
    _, score, knots = min(ok, key=lambda t: (t[0], t[1]))
    model = _fit_one(x, z, y, knots)
    info = {"form": "piecewise" if knots else "linear", "knots": list(knots), "cv_mape": score,
            "mape": _mape(_predict(model, x, z), y), "n": int(len(y)), "candidates": len(forms)}
    return with_single_ratio(model, x, z, y, info)


def with_single_ratio(model: LatencyModel, x: np.ndarray, z: np.ndarray, y: np.ndarray,
                      info: dict) -> tuple[LatencyModel, dict]:
    """The model with its single-token, single-row forwards (x = 1: matrix-vector products) scaled by the
    median measured / fitted ratio of those grid points, when the grid has two or more. One line or two hinges
    over the whole grid missed them by +9-11% on the 2-core box (1.68 ms measured, 1.83 fitted), as AR's and
    SD's batch-1 steps are; a knot there was within the cross-validation's noise, so the ratio is kept apart."""
    one = x == 1
    if one.sum() < 2:
        return model, info
    ratio = float(np.median(y[one] / np.asarray([model(1, 1, zi) for zi in z[one]])))
    info = {**info, "single_ratio": ratio}
    return LatencyModel(model.kind, {**model.params, "single_ratio": ratio}), info
