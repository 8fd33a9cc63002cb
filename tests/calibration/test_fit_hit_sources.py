"""Hit-curve sources: a fast-backup run's after-miss ranks fit their own "fast" source (its one-hot q leaves an
easier residual than a neural rejection), read by configs with the fast backup only; at T > 0 the neural
backup's table is fitted on the primary's rows as well, at T = 0 on its own (calibration.fit_hits)."""

import pytest

from calibration.fit_acceptance import RunRounds
from calibration.fit_hits import collect_ranks, fit_hits
from calibration.hits import HitCurve


def _rows(ranks_by_source: dict[bool, list[int]]) -> list[dict]:
    """One single-sequence round per rank, rejected at position 0, from the backup (True) or the cache."""
    return [{"accepted": [0], "bonus_rank": [rk], "from_backup": [src]}
            for src, ranks in ranks_by_source.items() for rk in ranks]


def _run(backup: str, temperature: float, primary: list[int], after_miss: list[int]) -> RunRounds:
    return RunRounds(k=4, temperature=temperature, sampler_c=1.0, backup=backup, top_n=16,
                     rounds=_rows({False: primary, True: after_miss}))


def test_fast_backup_ranks_are_their_own_source():
    got = collect_ranks(_run("fast", 0.0, [3, 4], [0, 0, 1]))
    assert [p[1] for p in got["fast"]] == [0, 0, 1] and got["backup"] == []
    assert [p[1] for p in got["primary"]] == [3, 4]
    neural = collect_ranks(_run("neural", 0.0, [3], [5, 6]))
    assert [p[1] for p in neural["backup"]] == [5, 6] and neural["fast"] == []


def test_fast_configs_read_the_fast_table_and_neural_ones_do_not():
    """Fast rows all rank 0, neural backup rows all rank 8: F = 1 hits always after a fast backup, never after
    a neural one (before session 30 both read one table mixing the two)."""
    hits, _ = fit_hits([_run("fast", 0.0, [0] * 20, [0] * 40), _run("neural", 0.0, [0] * 20, [8] * 40)])
    assert hits.hit(1, 0, 0.0, backup=True, fast=True) > 0.75
    assert hits.hit(1, 0, 0.0, backup=True) < 0.25
    assert hits.hit(1, 0, 0.0) > 0.75


def test_backup_pools_the_primary_rows_at_t_above_zero_only():
    """Primary rows rank 0, neural backup rows rank 8 (as many): at T = 0 the backup keeps its own table
    (F = 1 misses), at T = 0.7 it is fitted on both (F = 1 hits about half the time)."""
    runs = [_run("neural", t, [0] * 40, [8] * 40) for t in (0.0, 0.7)]
    hits, _ = fit_hits(runs)
    assert hits.hit(1, 0, 0.0, backup=True) < 0.25
    assert hits.hit(1, 0, 0.7, backup=True) == pytest.approx(0.5, abs=0.1)
    assert hits.hit(1, 0, 0.7) > 0.75                    # the primary's own table is unchanged


def test_a_curve_without_a_fast_source_reads_the_backup_one():
    curve = HitCurve({0.0: {"primary": {"c": 0.1, "r": 0.5}, "backup": {"c": 0.6, "r": 0.5}}})
    assert curve.miss(4, backup=True, fast=True) == curve.miss(4, backup=True) == pytest.approx(0.3)
    fast = HitCurve({0.0: {"primary": {"c": 0.1, "r": 0.5}, "backup": {"c": 0.6, "r": 0.5},
                           "fast": {"c": 0.2, "r": 0.5}}})
    assert fast.miss(4, backup=True, fast=True) == pytest.approx(0.1)
    assert HitCurve.from_dict(fast.to_dict()).miss(4, backup=True, fast=True) == pytest.approx(0.1)
