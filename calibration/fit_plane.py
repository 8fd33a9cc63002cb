"""The executor-overhead plane (calibration/overheads.plane) through per-shape mean overheads: which of its
terms (per token, per row, per position) the calibration shapes support, and their values."""

from __future__ import annotations

import numpy as np

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
    """The plane through the per-shape means with every term the shapes can tell apart. (Choosing terms by
    leave-one-shape-out error was tried: with the calibration's four SSD shapes, one left out, the rest
    cannot price a width, so it kept the flat line that undercharged widths 4-8.)"""
    line = _solve(shapes, ys, ns, tuple(range(len(TERMS))))
    return line, {"terms": [name for (name, _), c in zip(TERMS, line[1:]) if c > 0]}
