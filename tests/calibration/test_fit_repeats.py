"""Repeated passes of a benchmark are pooled without their extremes: one slow pass of a shared host (2026-12-03: the first
of five fidelity passes ran 0.55-0.65x after hours idle) must not set every charge slow, while stalls inside a run
still count (its mean) and fits of one run per shape are unchanged."""

from __future__ import annotations

import pytest

from calibration.fit_executor import fit_executor_costs, shape_overhead
from calibration.fit_latency import pool_repeats
from calibration.overheads import plane
from tests.calibration.test_fit_beside import _ssd
from tests.calibration.test_fit_cost_planes import ZERO


def test_shape_overhead_trims_the_extreme_run_means_from_three_runs():
    assert shape_overhead({0: [1.0, 3.0], 1: [2.0], 2: [9.0]}) == pytest.approx(2.0)   # means 2, 2, 9
    assert shape_overhead({0: [1.0, 3.0], 1: [9.0]}) == pytest.approx(13.0 / 3)       # two runs: all rows' mean


def _slowed(run, f: float):
    rows = [{**r, **{p: r[p] * f for p in ("verify_s", "glue_s", "fork_s", "tree_s")}} for r in run.rounds]
    return type(run)(**{**run.__dict__, "rounds": rows})


def test_one_slow_pass_of_five_leaves_the_fitted_costs_at_the_others():
    passes = [[_ssd(k, w, 1.0, overlap=False) for k, w in ((2, 1), (4, 1), (6, 2), (3, 4))] for _ in range(5)]
    passes[0] = [_slowed(r, 1.7) for r in passes[0]]
    costs, _ = fit_executor_costs(ZERO, ZERO, [r for p in passes for r in p], mode="ssd")
    for k, w in ((2, 1), (6, 2), (3, 4)):
        assert costs("verify", w, k + 1) == pytest.approx(plane((2e-3, 0.0, 0.0, 1e-4), w, k + 1), rel=5e-3)
    assert costs("fork", 1, 5) == pytest.approx(3e-4, rel=5e-3)
    pooled, _ = fit_executor_costs(ZERO, ZERO, [r for p in passes[:2] for r in p], mode="ssd")   # two passes: mean
    assert pooled("fork", 1, 5) == pytest.approx(3e-4 * 1.35, rel=5e-3)


def test_latency_rows_of_repeated_grids_take_their_trimmed_mean():
    row = {"who": "target", "batch": 1, "new_tokens": 4, "context": 64}
    rows = [{**row, "median_s": s} for s in (2.0, 1.0, 1.1, 0.9, 1.0)] + [{**row, "batch": 2, "median_s": 5.0}]
    got = pool_repeats(rows)
    assert [r["median_s"] for r in got] == pytest.approx([3.1 / 3] * 5 + [5.0])   # 1.0, 1.0, 1.1 kept
    assert pool_repeats(rows[:2]) == rows[:2]              # two grids: left as measured
