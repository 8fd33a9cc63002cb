"""Per-row acceptance multipliers fitted from runs whose requests differ (calibration/fit_rows.py)."""

import numpy as np
import pytest

from calibration import Measurements
from calibration.fit import run_of
from calibration.fit_acceptance import fit_acceptance
from calibration.fit_rows import fit_row_scales


def rows_run(rates_per_row, k=4, rounds_per_row=60, seed=0, temperature=0.0):
    """An SSD run of one request at a time: request s accepts i.i.d. with rate rates_per_row[s]."""
    rng = np.random.default_rng(seed)
    rows = []
    for s, rate in enumerate(rates_per_row):
        for _ in range(rounds_per_row):
            a = 0
            while a < k and rng.uniform() < rate:
                a += 1
            rows.append({"round": len(rows), "batch": 1, "verify_s": 0.01, "accepted": [a], "hit": [True],
                         "from_backup": [False], "bonus_rank": [0], "context": [100], "seq": [s]})
    spec = {"mode": "ssd", "k": k, "temperature": temperature, "sampler_c": 1.0, "backup": "neural"}
    return run_of(Measurements(meta={"spec": spec, "top_n": 64, "target": "t", "draft": "d"}, rounds=rows), "m")


def fitted(runs):
    model, _ = fit_acceptance(runs)
    scales, info = fit_row_scales(runs, model)
    return model, scales, info


def test_two_kinds_of_request_give_two_groups_of_multipliers():
    run = rows_run([0.45] * 4 + [0.9] * 4, rounds_per_row=150)
    model, scales, info = fitted([run])
    per_row = info["runs"][0]["scales"]
    assert max(per_row[:4]) < 0.85 < 1.05 < min(per_row[4:])
    assert info["runs"][0]["between_share"] > 0.9
    # each row's multiplier reproduces its (shrunk) mean accepted length at the run's K
    for m, a in zip(per_row, info["runs"][0]["mean_accepted"]):
        assert model.expected_tokens(4, 0.0, 1.0, scale=m) - 1 == pytest.approx(a, rel=0.1)
    assert len(scales[0.0]) == 16 and list(scales[0.0]) == sorted(scales[0.0])


def test_alike_requests_are_shrunk_toward_one():
    """Rows drawn from one rate differ only by sampling noise (8 rows x 40 rounds): over 20 seeds the between
    share is 0 in most and the multipliers stay near 1, while two real kinds (above) keep a share > 0.9."""
    shares, devs = [], []
    for seed in range(20):
        _, scales, info = fitted([rows_run([0.75] * 8, rounds_per_row=40, seed=seed)])
        shares.append(info["runs"][0]["between_share"])
        devs.append(max(abs(m - 1) for m in scales[0.0]))
    assert np.median(shares) < 0.3 and np.median(devs) < 0.03 and max(devs) < 0.15


def test_runs_without_request_ids_fit_no_multipliers():
    run = rows_run([0.5, 0.9])
    for row in run.rounds:
        del row["seq"]
    _, scales, _ = fitted([run])
    assert scales == {}
