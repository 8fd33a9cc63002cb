"""The machine's slow speed drift from runs' round times (calibration/fit_drift.py): a slow stretch is read
as drift, a run's structure (narrower rounds at a queue's tail, SSD misses) is not, and the series averages 1
over the rounds drawn at its clock."""

import numpy as np
import pytest

from calibration.errors import ConfigError
from calibration.fit_acceptance import RunRounds
from calibration.fit_drift import DRIFT_WINDOW, speed_drift
from calibration.overheads import DRIFT_DT_S, ExecutorCosts


def _run(durations, widths=None, missed=None):
    rows = [{"batch_index": 0, "t0": 0.0, "t1": 0.001}]      # a first round (not steady)
    t = 0.001
    for i, d in enumerate(durations):
        row = {"batch_index": 0, "t0": t, "t1": t + d, "width": (widths or [1] * len(durations))[i]}
        if missed is not None:
            row["from_backup"] = [bool(missed[i])]
        rows.append(row)
        t += d
    return RunRounds(k=3, temperature=0.0, sampler_c=1.0, mode="ar", rounds=rows)


def test_a_slow_stretch_is_drift():
    """300 rounds of 2 ms, the middle 100 at 3 ms: the series reads 1.5x the rest there (scaled so rounds
    average 1), and nothing before or after."""
    d = [0.002] * 100 + [0.003] * 100 + [0.002] * 100
    s, info = speed_drift([_run(d)])
    s = np.asarray(s)
    assert info["n_runs"] == 1 and info["dt_s"] == DRIFT_DT_S
    early, slow = s[: int(0.15 / DRIFT_DT_S)], s[int(0.25 / DRIFT_DT_S): int(0.45 / DRIFT_DT_S)]
    assert slow.mean() / early.mean() == pytest.approx(1.5, rel=0.02)
    assert np.mean(1.0 / s) == pytest.approx(1.0, rel=1e-3)   # (stored to 4 decimals)


def test_a_narrower_tail_and_misses_are_not_drift():
    """Width-4 rounds of 4 ms then width-1 rounds of 2 ms, and misses twice as long: each against its own
    kind's median, so the series stays flat."""
    rng = np.random.default_rng(0)
    widths = [4] * 150 + [1] * 150
    missed = rng.random(300) < 0.2
    d = [(0.004 if w == 4 else 0.002) * (2.0 if m else 1.0) for w, m in zip(widths, missed)]
    run = _run(d, widths, missed)
    run.mode = "ssd"
    s = np.asarray(speed_drift([run])[0])
    assert s.max() / s.min() < 1.02


def test_short_runs_give_no_series_and_costs_round_trip_it():
    assert speed_drift([_run([0.002] * (3 * DRIFT_WINDOW - 1))]) == ([], {"n_runs": 0})
    ex = ExecutorCosts().with_drift([1.0, 0.9, 1.2])
    back = ExecutorCosts.from_dict(ex.to_dict())
    assert back.drift == (1.0, 0.9, 1.2) and "drift" not in ExecutorCosts().to_dict()
    with pytest.raises(ConfigError, match=r"profile\.executor\.drift\[1\]"):
        ExecutorCosts.from_dict({"drift": [1.0, 0.0]})
    with pytest.raises(ConfigError, match=r"profile\.executor\.drift"):
        ExecutorCosts.from_dict({"drift": "fast"})
