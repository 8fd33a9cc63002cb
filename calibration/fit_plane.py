"""The executor-overhead plane (calibration/overheads.plane) through per-shape mean overheads: which of its
terms (per token, per row, per position) the calibration shapes support, and their values."""

from __future__ import annotations

from itertools import combinations

import numpy as np

from calibration.overheads import plane

# the plane's terms (calibration/overheads.py), in the order a degenerate set of shapes keeps them: at a single
# width the per-token and per-position columns coincide and the per-token one stays (it extrapolates with width)
TERMS = (("per_token", lambda b, n: b * n), ("per_row", lambda b, n: b), ("per_position", lambda b, n: n))


def _solve(shapes: np.ndarray, ys: np.ndarray, ns: np.ndarray, terms: tuple[int, ...]) -> list[float]:
    """[base, per_token, per_row, per_position] with only `terms` free: count-weighted least squares through
    the per-shape mean overheads, slopes >= 0 (each is work that grows with its count), a term left at 0 where
    the shapes cannot tell it from the ones before it (one width: no per-row term; one K: no per-position)."""
    from scipy.optimize import lsq_linear
    b, n = shapes[:, 0], shapes[:, 1]
    cols, keep = [np.ones_like(b)], []
    for i in terms:
        c = TERMS[i][1](b, n).astype(float)
        if np.linalg.matrix_rank(np.column_stack([*cols, c])) > len(cols):
            cols.append(c)
            keep.append(i)
    x, w = np.column_stack(cols), np.sqrt(ns)
    lo = np.r_[-np.inf, np.zeros(len(keep))]
    coef = lsq_linear(x * w[:, None], ys * w, bounds=(lo, np.full(len(cols), np.inf))).x
    out = [float(coef[0]), 0.0, 0.0, 0.0]
    for i, c in zip(keep, coef[1:]):
        out[1 + i] = float(c)
    return out


def fit_plane(shapes: np.ndarray, ys: np.ndarray, ns: np.ndarray) -> tuple[list[float], dict]:
    """The plane through the per-shape means, its free terms chosen by leave-one-shape-out error (count-
    weighted; the fewest terms within 5% of the best), so four shapes do not buy four exact coefficients."""
    subsets = [t for r in range(len(TERMS) + 1) for t in combinations(range(len(TERMS)), r)]
    if len(ys) < 3:
        return _solve(shapes, ys, ns, tuple(range(len(TERMS)))), {"terms": "rank"}
    scores = []
    for terms in subsets:
        err = 0.0
        for i in range(len(ys)):
            m = np.arange(len(ys)) != i
            line = _solve(shapes[m], ys[m], ns[m], terms)
            err += ns[i] * (plane(line, *shapes[i]) - ys[i]) ** 2
        scores.append(float(np.sqrt(err / ns.sum())))
    best = min(scores)
    pick = next(t for t, e in zip(subsets, scores) if e <= 1.05 * best + 1e-7)
    return _solve(shapes, ys, ns, pick), {"terms": [TERMS[i][0] for i in pick], "loo_rms_s": scores[subsets.index(pick)]}
