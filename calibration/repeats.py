"""Pooling a measurement repeated over benchmark passes: one slow pass of a shared host (2026-12-03: the first of
five fidelity passes ran 0.55-0.65x after hours idle) must not move a fit, and the benchmarks report each
config's median over passes, so the fits pool repeats without their extremes (docs/DESIGN.md, the time model)."""

from __future__ import annotations

import numpy as np

MIN_REPEATS_TO_TRIM = 3


def trimmed_mean(xs: list[float]) -> float:
    """The mean without the lowest and the highest value (three values: the median)."""
    return float(np.mean(sorted(xs)[1:-1]))
