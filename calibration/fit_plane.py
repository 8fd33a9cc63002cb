"""The executor-overhead plane (calibration/overheads.plane) through per-shape mean overheads: which of its
terms (per token, per row, per position, and for a K-step loop's steps a per-loop set-up) the calibration
shapes support, and their values."""

from __future__ import annotations

import numpy as np

# the plane's terms (calibration/overheads.py), in the order a degenerate set of shapes keeps them: at a single
# width the per-token and per-position columns coincide and the per-token one stays (it extrapolates with width);
# per_loop (a loop's set-up shared by its K steps: 1 / K per step) only where the shapes span several K
TERMS = (("per_token", lambda b, n, k: b * n), ("per_row", lambda b, n, k: b), ("per_position", lambda b, n, k: n),
         ("per_loop", lambda b, n, k: np.where(k > 0, 1.0 / np.maximum(k, 1), 0.0)))


LOOP_SHARE = 0.1    # each of two K at one width must carry this share of a kind's rounds to price a set-up


def loops_told_apart(b: np.ndarray, k: np.ndarray, ns: np.ndarray) -> bool:
    """Whether the shapes can price a loop's set-up: at some width, loops of two K each carry LOOP_SHARE of the
    rounds (``ns`` per shape). Otherwise 1 / K moves with the width and the set-up stands in for a per-row cost
    (2026-12-02: SD at T = 0.7, calibrated at K 4 on widths 1-2 and K 3 on width 6, their queue tails a few dozen
    rounds of the other K, fitted a 0.87 ms set-up that charged K = 2 rounds 20% slow)."""
    big = (k > 0) & (ns >= LOOP_SHARE * ns.sum())
    return any(np.unique(k[big & (b == w)]).size > 1 for w in np.unique(b))


def _solve(shapes: np.ndarray, ys: np.ndarray, ns: np.ndarray, terms: tuple[int, ...]) -> list[float]:
    """[base, per_token, per_row, per_position, per_loop] with only `terms` free: count-weighted least squares
    through the per-shape mean overheads, slopes >= 0 (each is work that grows with its count), a term left at 0
    where the shapes cannot tell it from the ones before it (one width: no per-row term; one K: no per-position
    and no per-loop). Shapes are rows (width, new tokens(, K of the loop, 0 for a single forward))."""
    from scipy.optimize import lsq_linear
    b, n = shapes[:, 0], shapes[:, 1]
    k = shapes[:, 2] if shapes.shape[1] > 2 else np.zeros_like(b)
    cols, keep = [np.ones_like(b)], []
    for i in terms:
        c = np.asarray(TERMS[i][1](b, n, k), dtype=float)
        if TERMS[i][0] == "per_loop" and not loops_told_apart(b, k, ns):
            continue
        if np.linalg.matrix_rank(np.column_stack([*cols, c])) > len(cols):
            cols.append(c)
            keep.append(i)
    x, w = np.column_stack(cols), np.sqrt(ns)
    lo = np.r_[-np.inf, np.zeros(len(keep))]
    coef = lsq_linear(x * w[:, None], ys * w, bounds=(lo, np.full(len(cols), np.inf))).x
    out = [float(coef[0]), 0.0, 0.0, 0.0, 0.0]
    for i, c in zip(keep, coef[1:]):
        out[1 + i] = float(c)
    return out if out[4] > 0 else out[:4]     # the four-term plane where no set-up is fitted


def fit_plane(shapes: np.ndarray, ys: np.ndarray, ns: np.ndarray) -> tuple[list[float], dict]:
    """The plane through the per-shape means with every term the shapes can tell apart. (Choosing terms by
    leave-one-shape-out error was tried: with the calibration's four SSD shapes, one left out, the rest
    cannot price a width, so it kept the flat line that undercharged widths 4-8.)"""
    line = _solve(shapes, ys, ns, tuple(range(len(TERMS))))
    return line, {"terms": [name for (name, _), c in zip(TERMS, line[1:]) if c > 0]}
