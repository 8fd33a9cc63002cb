"""The slower rounds after an idle gap, from load-mode rounds (calibration/fit_idle.py): the extra share per
position is read against the run's steady rounds of the same width; short gaps, rounds that continue a live row and
positions with too few stretches do not count; the profile keeps the shares and refuses bad ones."""

import pytest

from calibration.errors import ConfigError
from calibration.fit_idle import MIN_SAMPLES, after_idle
from calibration.overheads import IDLE_GAP_S, ExecutorCosts


def _stretches(n, excess, gap_s, steady_s=0.001, width=1, rounds_each=20):
    """n busy stretches of one request each (its own seq), ``rounds_each`` rounds, after a gap of ``gap_s``: round
    i of a stretch lasts steady_s x (1 + excess[i])."""
    rows, t = [], 0.0
    for s in range(n):
        t += gap_s
        for i in range(rounds_each):
            d = steady_s * (1.0 + (excess[i] if i < len(excess) else 0.0))
            rows.append({"t0": t, "t1": t + d, "seq": [s], "width": width})
            t += d
    return rows


def test_recovers_the_extra_share_of_each_round_after_a_gap():
    ex, info = after_idle([_stretches(12, [0.5, 0.3, 0.1], gap_s=0.01)])
    assert ex == pytest.approx([0.5, 0.3, 0.1])
    assert info["idle_gaps"] == 11          # the run's first stretch has no round before it
    wide, _ = after_idle([_stretches(12, [0.5, 0.3], gap_s=0.01, steady_s=0.004, width=4)])
    assert wide == pytest.approx([0.5, 0.3])   # relative to its own width's steady round


def test_short_gaps_and_continuing_rows_do_not_count():
    assert after_idle([_stretches(12, [0.5, 0.3], gap_s=IDLE_GAP_S / 2)])[0] == []
    rows = _stretches(12, [0.5, 0.3], gap_s=0.01)
    for r in rows:
        r["seq"] = [0]                      # one request throughout: never a gap between live rows
    assert after_idle([rows])[0] == []


def test_too_few_stretches_or_no_excess_fit_nothing():
    assert after_idle([_stretches(MIN_SAMPLES - 1, [0.5], gap_s=0.01)])[0] == []
    assert after_idle([_stretches(12, [0.01, 0.5], gap_s=0.01)])[0] == []   # cut at the first position below 2%
    assert after_idle([])[0] == []


def test_profile_keeps_after_idle_and_refuses_bad_values():
    ex = ExecutorCosts(after_idle=[0.5, 0.25])
    back = ExecutorCosts.from_dict(ex.to_dict())
    assert back.after_idle == (0.5, 0.25)
    assert "after_idle" not in ExecutorCosts().to_dict()      # written only when fitted
    with pytest.raises(ConfigError, match=r"profile\.executor\.after_idle\[1\]"):
        ExecutorCosts(after_idle=[0.5, -0.1])
    with pytest.raises(ConfigError, match=r"profile\.executor\.after_idle"):
        ExecutorCosts.from_dict({"after_idle": "fast"})
