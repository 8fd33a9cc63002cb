"""SSD rounds measured with the draft building beside the verification (Profile.beside_slowdown > 1) are fitted at
full speed: ``unshared`` inverts the simulator's overlap exactly, the executor fit recovers the full-speed costs
from slowed rounds, inline runs (no overlap) and SD runs are left as measured, and calibration.fit takes the
slowdown from the microbenchmark's meta["beside"]."""

from __future__ import annotations

import pytest

from calibration.fit import beside_of
from calibration.fit_acceptance import RunRounds
from calibration.fit_executor import fit_executor_costs, kind_rows, unshared
from calibration.overheads import plane
from tests.calibration.test_fit_cost_planes import ZERO, _fan
from tests.sim.test_placement import toy


@pytest.mark.parametrize("v,t", [(0.004, 0.003), (0.003, 0.005), (0.002, 0.002)])
def test_unshared_inverts_the_overlap(v, t):
    s = 1.2
    m = min(v, t)                                   # shared.py: both start together, each slowed while both run
    assert unshared(v + (s - 1) * m, t + (s - 1) * m, s) == pytest.approx((v, t), rel=1e-12)
    assert unshared(v, t, 1.0) == (v, t)


def _ssd(k: int, width: int, s: float, overlap: bool = True) -> RunRounds:
    """SSD rounds whose full-speed verify is 2 ms + 0.1 ms per position and build 0.2 + 0.3 + K x 0.25 ms,
    measured slowed where they overlap (the shorter side's wall time) by ``s``."""
    rows = []
    for i in range(20):
        v, glue, fork, tree = plane((2e-3, 0.0, 0.0, 1e-4), width, k + 1), 2e-4, 3e-4, k * 2.5e-4
        extra = (s - 1) * min(v, glue + fork + tree) if overlap else 0.0
        f = (glue + fork + tree + extra) / (glue + fork + tree)
        rows.append({"batch_index": 0, "round": i, "t0": 0.0, "t1": 0.0, "batch": width, "width": width,
                     "accepted": [0] * width, "from_backup": [False] * width, "context": [10] * width,
                     "verify_s": v + extra, "glue_s": glue * f, "fork_s": fork * f, "tree_s": tree * f})
    return RunRounds(k=k, temperature=0.0, sampler_c=1.0, mode="ssd", budget=8, fanout=_fan(k, 8), rounds=rows,
                     overlap=overlap)


def test_fit_recovers_full_speed_costs_from_slowed_rounds():
    runs = [_ssd(k, w, 1.1) for k, w in ((2, 1), (4, 1), (6, 2), (3, 4))]
    costs, _ = fit_executor_costs(ZERO, ZERO, runs, mode="ssd", beside=1.1)
    for k, w in ((2, 1), (6, 1), (3, 4)):
        assert costs("verify", w, k + 1) == pytest.approx(plane((2e-3, 0.0, 0.0, 1e-4), w, k + 1), rel=5e-3)
    assert costs("fork", 1, 5) == pytest.approx(3e-4, rel=5e-3)
    slowed, _ = fit_executor_costs(ZERO, ZERO, runs, mode="ssd")      # not told: the slowdown stays in the line
    assert slowed("verify", 1, 3) > costs("verify", 1, 3) * 1.01


def test_inline_runs_are_taken_as_measured():
    run = _ssd(4, 1, 1.0, overlap=False)
    plain = kind_rows([run])
    told = kind_rows([run], beside=1.3)
    assert told[("greedy", "verify")] == plain[("greedy", "verify")]


def test_beside_comes_from_the_microbenchmark_meta_else_the_base():
    got, info = beside_of([{"beside": {"slowdown": 1.06}}, {"beside": {"slowdown": 1.10}}, {}], None)
    assert got == pytest.approx(1.08) and info["from"] == "microbenchmark"
    assert beside_of([{}], toy().with_(beside_slowdown=1.2))[0] == 1.2
    assert beside_of([{}], None) == (1.0, {"from": "default: no beside measurement"})


def test_autotune_report_states_the_measured_slowdown():
    from saguaro.autotune_report import profile_rows

    p = toy().with_(beside_slowdown=1.13, provenance={"beside": {"from": "microbenchmark",
                                                                 "measured": [{"cycles": 40}, {"cycles": 40}]}})
    row = next(r for r in profile_rows(p) if r[0] == "draft beside the target")
    assert row[1].startswith("x1.130") and row[2] == 80
    assert not any(r[0] == "draft beside the target" for r in profile_rows(toy()))


def test_preempted_rounds_are_left_out_of_the_executor_fit():
    """A round whose verifier lost its core (wall beyond its thread CPU time) is no cost of the forward: left out,
    unless most of the run was (then the run is kept whole); rows without the CPU time (GPU runs) are kept."""
    from calibration.fit_executor import preempted, timed_rounds

    run = _ssd(4, 1, 1.0, overlap=False)
    for i, row in enumerate(run.rounds):
        row["verify_cpu_s"] = row["verify_s"]
        if i % 5 == 4:                                 # a fifth of the rounds: 4x slow, the core taken away
            row["verify_s"] *= 4
    assert preempted(run.rounds[4]) and not preempted(run.rounds[3]) and not preempted({"verify_s": 1.0})
    costs, info = fit_executor_costs(ZERO, ZERO, [run], mode="ssd")
    assert costs("verify", 1, 5) == pytest.approx(plane((2e-3, 0.0, 0.0, 1e-4), 1, 5), rel=1e-6)
    assert info["preempted_rounds_left_out"] == 4      # rounds 4, 9, 14, 19 of the 19 steady ones
    for row in run.rounds:
        row["verify_s"] *= 4                           # preempted throughout: kept whole
    assert timed_rounds(run)[1] == 0
