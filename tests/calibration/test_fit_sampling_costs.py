"""Executor costs that depend on how the draft samples and how wide it runs: the sigma_{F,C} sampler at C < 1
(its top-F, scatter and rescale on every sampled row) and the draft's own per-round time growing with the batch
width and the q rows its pushed cache carries at T > 0. Fitted back from runs with known truth, then charged by
the time model, the simulator and the closed forms alike."""

from __future__ import annotations

import pytest

from calibration import AcceptanceModel, HitCurve, LatencyModel, Profile
from calibration.fit_acceptance import RunRounds
from calibration.fit_executor import fit_executor_costs
from calibration.fit_ssd_round import draft_round
from calibration.overheads import ExecutorCosts
from saguaro_sim import SpecConfig, Workload, simulate
from saguaro_sim.analytic import predict
from saguaro_sim.costs import RoundCosts
from saguaro_sim.resolve import resolve

ZERO = LatencyModel.constant(0.0)
K, FAN = 2, (2, 1, 1)          # 4 branches


def _rows(n: int = 30, width: int = 1, **kw) -> list[dict]:
    return [{"batch_index": 0, "round": i, "t0": 0.0, "t1": 0.0, "batch": width, "width": width,
             "accepted": [0] * width, "from_backup": [False] * width, "context": [10] * width, **kw}
            for i in range(n)]


def _ssd(t: float, c: float, tree_step: float, glue: float = 0.001) -> RunRounds:
    return RunRounds(k=K, temperature=t, sampler_c=c, mode="ssd", budget=4, fanout=FAN,
                     rounds=_rows(glue_s=glue, fork_s=0.0004, tree_s=K * tree_step))


def _profile(costs: ExecutorCosts) -> Profile:
    return Profile(name="sampling", target=LatencyModel.constant(0.002), draft=LatencyModel.constant(0.0005),
                   link_s=0.0, acceptance=AcceptanceModel.geometric(0.7), hits=HitCurve.power_law(0.2, 0.5),
                   executor=costs)


def test_saguaro_sampling_at_c_below_1_fitted_apart_and_charged():
    """Tree steps 0.5 ms greedy, 0.6 ms sampled at C = 1, 0.9 ms at C = 0.5 (glue alike): the C < 1 runs get a
    sampled_c tree line 0.3 ms above the sampled one (not pooled into it), C = 1 and T = 0 keep theirs, and a
    build-bound SSD round is simulated and predicted that much longer per tree step."""
    runs = [_ssd(0.0, 1.0, 0.0005), _ssd(0.7, 1.0, 0.0006), _ssd(1.0, 1.0, 0.0006), _ssd(0.7, 0.5, 0.0009)]
    costs, info = fit_executor_costs(ZERO, ZERO, runs, mode="ssd")
    assert costs("tree_step", 1, 4, 0.0) == pytest.approx(0.0005)
    assert costs("tree_step", 1, 4, 0.7, 1.0) == pytest.approx(0.0006)        # the C < 1 rows left out of it
    assert costs("tree_step", 1, 4, 0.7, 0.5) == pytest.approx(0.0009)
    assert costs("tree_step", 1, 4, 1.0, 0.7) == pytest.approx(0.0009)        # any T > 0 with C < 1
    assert costs("glue", 1, K + 1, 0.7, 0.5) == costs("glue", 1, K + 1, 0.7, 1.0) == pytest.approx(0.001)
    assert info["sampled_c.tree_step"]["extra_over_sampled_s"] == pytest.approx(0.0003)
    assert set(costs.lines["sampled_c"]) == {"tree_step"}
    assert ExecutorCosts.from_dict(costs.to_dict()) == costs

    p, wl = _profile(costs), Workload(num_sequences=2, output_tokens=400, prompt_tokens=10)
    spec = SpecConfig(mode="ssd", k=K, fanout=FAN, temperature=0.7, backup="neural")
    lo = spec.replace(sampler_c=0.5)
    c1, c5 = (RoundCosts(p, s, resolve(s, p)) for s in (spec, lo))
    assert c5.build(1, 10, 4) - c1.build(1, 10, 4) == pytest.approx(K * 0.0003)
    r1, r5 = (simulate(p, s, wl, seed=0, protocol="reply") for s in (spec, lo))
    assert r5.sim_time_s / r5.rounds - r1.sim_time_s / r1.rounds == pytest.approx(K * 0.0003, rel=0.15)
    t1, t5 = (predict(p, s, wl, protocol="reply").round_time_s for s in (spec, lo))   # the closed form too
    assert t5 - t1 == pytest.approx(K * 0.0003, rel=1e-6)


def test_only_c_below_1_runs_at_t_above_0_stay_the_sampled_line():
    """With no C = 1 run at T > 0 the C < 1 rows are the sampled line, as before (no sampled_c line)."""
    costs, _ = fit_executor_costs(ZERO, ZERO, [_ssd(0.0, 1.0, 0.0005), _ssd(0.7, 0.5, 0.0009)], mode="ssd")
    assert "sampled_c" not in costs.lines
    assert costs("tree_step", 1, 4, 0.7, 0.5) == costs("tree_step", 1, 4, 0.7, 1.0) == pytest.approx(0.0009)


def _push_run(width: int, fan: tuple[int, ...], own_s: float, t: float = 0.7) -> RunRounds:
    """Push rounds whose hand-off stamps put `own_s` of the draft's own time between its build (2 ms) and
    waiting for the next outcome (msg 0.1 ms)."""
    build, msg, rows, start = 0.002, 1e-4, [], 0.0
    for i in range(40):
        end = start + 1e-5
        hand = {"outcome_seen": (start, end), "settle": (end, end + 1e-5), "pack": (end + build - 1e-4, end + build)}
        rows.append({**_rows(1, width)[0], "round": i, "msg_s": msg, "glue_s": 0.0005, "fork_s": 0.0003,
                     "tree_s": build - 0.0008, "handoff": hand})
        start = end + build + own_s + msg
    return RunRounds(k=K, temperature=t, sampler_c=1.0, mode="ssd", protocol="push", budget=sum(fan), fanout=fan,
                     rounds=rows)


def test_draft_round_a_line_in_width_and_q_rows_and_charged_per_round():
    """The draft's own time = 0.1 ms + 0.04 ms per row + 5 us per q row (width x branches x K) at T = 0.7, from
    runs at (width, branches) (1, 4), (4, 4), (2, 8) (q rows 8, 32, 32: the two separate): fitted back, and a
    width-4 build-bound push round is charged it by the costs, the simulator and the closed form alike."""
    truth = {"median_s": 1e-4, "per_row_s": 4e-5, "per_q_row_s": 5e-6}

    def own(w: int, fan: tuple[int, ...]) -> float:
        return truth["median_s"] + truth["per_row_s"] * w + truth["per_q_row_s"] * w * sum(fan) * K

    shapes = ((1, (2, 1, 1)), (4, (2, 1, 1)), (2, (4, 2, 2)))
    d, info = draft_round([_push_run(w, f, own(w, f)) for w, f in shapes])
    assert info["from"] == ["stamps"] and d["stall_frac"] == 0.0
    for key, v in truth.items():
        assert d[key] == pytest.approx(v, rel=0.03, abs=2e-7), (key, d)
    flat, _ = draft_round([_push_run(1, (2, 1, 1), own(1, (2, 1, 1)))])     # one shape: the plain median
    assert set(flat) == {"median_s", "stall_s", "stall_frac"} and flat["median_s"] == pytest.approx(own(1, FAN))

    p = _profile(ExecutorCosts(draft_round=d))
    spec = SpecConfig(mode="ssd", k=K, fanout=FAN, temperature=0.7, batch_size=4, backup="neural")
    c = RoundCosts(p, spec, resolve(spec, p, protocol="push"))
    assert c.draft_round_mean(4, 4) == pytest.approx(own(4, FAN), rel=0.03)
    assert c.draft_round_mean(1, 4) == pytest.approx(own(1, FAN), rel=0.03)
    slow = p.with_(draft=LatencyModel.constant(0.004))         # the build binds the round
    wl = Workload(num_sequences=4, output_tokens=300, prompt_tokens=10)
    res = simulate(slow, spec, wl, seed=0, protocol="push")
    bare = simulate(slow.with_(executor=None), spec, wl, seed=0, protocol="push")
    assert res.sim_time_s / res.rounds - bare.sim_time_s / bare.rounds == pytest.approx(own(4, FAN), rel=0.1)
    closed = [predict(q, spec, wl, protocol="push").round_time_s for q in (slow, slow.with_(executor=None))]
    assert closed[0] - closed[1] == pytest.approx(own(4, FAN), rel=0.03)
