"""The fidelity phase breakdown: measured seconds per phase next to the simulator's charge for the same rounds."""

from __future__ import annotations

import pytest

from bench.fidelity_phases import breakdown, format_breakdown, largest_miss
from calibration import AcceptanceModel, HitCurve, LatencyModel, Measurements, Profile
from calibration.overheads import ExecutorCosts


def _profile() -> Profile:
    lines = {"greedy": {"ar_step": [0.0005, 0.0001], "verify": [0.001, 0.0], "draft_step": [0.0002, 0.0]}}
    return Profile(name="toy", target=LatencyModel.linear(base=0.003, per_token=0.0001),
                   draft=LatencyModel.constant(0.0008), link_s=0.0, acceptance=AcceptanceModel.geometric(0.8),
                   hits=HitCurve.power_law(c=0.3, r=0.5), executor=ExecutorCosts(lines=lines))


def _rows(n, width, span, **times):
    return [{"round": i, "t0": i * span, "t1": (i + 1) * span, "batch": width, "width": width,
             "accepted": [1] * width, "context": [50] * width, "refill": [0] if i == 0 else [],
             "prefill_s": 0.004 if i == 0 else 0.0, **times} for i in range(n)]


def test_ar_and_sd_rounds_charged_as_the_simulator_costs_them():
    p = _profile()
    step = 0.003 + 0.0001 * 4 + 0.0005 + 0.0001 * 4          # target(4, 1) + ar_step overhead at width 4
    ar = Measurements(meta={"spec": {"mode": "ar", "k": 0, "batch_size": 4}}, rounds=_rows(20, 4, step, verify_s=step))
    b = breakdown(p, [ar])
    assert b["rounds"] == 19 and b["width"] == 4                  # the first round (prefill) is left out
    assert b["phases"]["step"]["charged_s"] == pytest.approx(step) and b["round_error"] == pytest.approx(0, abs=1e-9)
    assert b["phases"]["step"]["micro_s"] == pytest.approx(0.0034)
    k = 3
    verify, draft = 0.003 + 0.0001 * 2 * (k + 1) + 0.001, k * (0.0008 + 0.0002)
    slow = verify + 0.002                                          # the executor verifies 2 ms slower than charged
    sd = Measurements(meta={"spec": {"mode": "sd", "k": k, "batch_size": 2}},
                      rounds=_rows(20, 2, slow + draft, verify_s=slow))
    b = breakdown(p, [sd, sd])
    assert b["phases"]["draft"]["diff_s"] == pytest.approx(0, abs=1e-9)
    assert b["phases"]["verify"]["diff_s"] == pytest.approx(-0.002)
    assert largest_miss(b) == ("verify", pytest.approx(-0.002))
    assert b["round_error"] == pytest.approx((verify + draft) / (slow + draft) - 1)
    assert b["prefill_per_row_s"] == pytest.approx(0.004) and b["prefills"] == 2
    text = format_breakdown("sd k3 b2", b)
    assert "largest: verify -2.00 ms" in text and "prefill 4.00 ms/row" in text


def test_ssd_sides_and_the_draft_rounds_own_time():
    p = _profile()
    rows = _rows(10, 1, 0.010, verify_s=0.004, msg_s=0.0001, wait_s=0.0059, glue_s=0.001, fork_s=0.0005,
                 tree_s=0.006, backup_s=0.0)
    ssd = Measurements(meta={"spec": {"mode": "ssd", "k": 2, "budget": 4, "fanout": [2, 1, 1]}, "fanout": [2, 1, 1]},
                       rounds=rows)
    b = breakdown(p, [ssd], {"round_s": 0.011})
    assert b["draft_side_s"] == pytest.approx(0.0075) and b["verifier_side_s"] == pytest.approx(0.0041)
    assert b["phases"]["draft_round"]["measured_s"] == pytest.approx(0.010 - 0.0075 - 0.0001)   # draft-bound
    assert b["charged_round_s"] == 0.011 and b["round_error"] == pytest.approx(0.1)
    assert "backup" not in b["phases"]
