"""Fitting the executor's own costs back from runs with known truth: per-kind overheads at the batch width,
the sampling extra at T > 0, the effective link, and the push protocol's draft-side round and verifier lookup."""

from __future__ import annotations

import pytest
from fit_helpers import grid, lin_truth, pw_truth

from calibration import HitCurve, LatencyModel, Measurements, Profile, fit


def _costs(p, **spec):
    from saguaro_sim import SpecConfig
    from saguaro_sim.costs import RoundCosts
    from saguaro_sim.resolve import resolve

    sp = SpecConfig(**spec)
    return RoundCosts(p, sp, resolve(sp, p))


def test_executor_overheads_and_effective_link_from_ssd_rounds():
    k, fan, ctx = 3, [4, 3, 2, 3], 100.0  # budget 12
    verify = lin_truth(k + 1, ctx) + 0.002
    glue, fork, tree = pw_truth(k + 1, ctx) + 0.001, 0.0015, k * (pw_truth(12, ctx) + 0.001) - 0.0015
    rows, t = [], 0.0
    for i in range(60):
        period = 0.03 + 0.001 * (i % 3)  # verification + messages bind (the build takes ~20 ms)
        rows.append({"round": i, "t0": t, "t1": t + period, "batch": 1, "verify_s": verify, "glue_s": glue,
                     "fork_s": fork, "tree_s": tree, "backup_s": 0.0,
                     "accepted": [i % (k + 1)], "from_backup": [False], "bonus_rank": [0], "context": [ctx]})
        t += period
    run = Measurements(meta={"spec": {"mode": "ssd", "k": k, "temperature": 0.0}, "fanout": fan}, rounds=rows)
    p = fit(grid(), run)
    c = _costs(p, mode="ssd", k=k, fanout=tuple(fan))
    assert p.target(1, k + 1, ctx) == pytest.approx(lin_truth(k + 1, ctx), rel=0.03)  # microbenchmarks stay bare
    assert c.verify(1, ctx) == pytest.approx(verify, rel=0.03)                          # + the verify overhead
    assert c.build(1, ctx, 12) == pytest.approx(glue + fork + tree, rel=0.03)          # glue + fork + K tree steps
    assert p.executor("fork", 1, k + 1) == pytest.approx(fork, rel=1e-6)               # no microbenchmark: all of it
    assert p.executor("verify", 1, 1) == pytest.approx(0.002, rel=0.05)  # one width seen: a flat line
    assert p.provenance["executor_fit"]["greedy.verify"]["n"] == 59
    m = p.link_s                                   # reply: the model's round max(V + m, build) + m = the mean
    assert max(verify + m, glue + fork + tree) + m == pytest.approx(0.031, rel=0.01) and p.link_bytes_per_s == 0.0
    assert p.provenance["link_microbench_s"] == pytest.approx(1e-4, rel=0.02)
    assert Profile.from_dict(p.to_dict()).executor == p.executor
    bare = fit(grid(), run, executor=False)  # the microbenchmarks alone
    assert bare.executor is None and _costs(bare, mode="ssd", k=k).verify(1, ctx) == pytest.approx(
        lin_truth(k + 1, ctx), rel=0.03)
    assert bare.link_s == pytest.approx(1e-4, rel=0.02)


def test_overheads_fitted_per_kind_at_the_batch_width_and_extrapolated_linearly():
    """Verify overheads 1 ms + 0.1 ms per token at batch widths 1 and 2 (finished rows ride along: the width
    is the batch's, not the live count); the fitted line extrapolates to width 8 instead of staying flat."""
    k, ctx, rows = 2, 50.0, []
    for bi, width in enumerate((1, 2)):
        for i in range(30):
            live = width if i < 25 else 1                   # the batch's last rounds: one row still live
            over = 0.001 + 0.0001 * width * (k + 1)
            rows.append({"batch_index": bi, "round": i, "t0": i, "t1": i + 1, "batch": live,
                         "verify_s": lin_truth(width * (k + 1), width * ctx) + over, "accepted": [0] * live,
                         "from_backup": [False] * live, "bonus_rank": [0] * live, "context": [ctx] * live})
    p = fit(grid(), Measurements(meta={"spec": {"mode": "sd", "k": k, "temperature": 0.0}}, rounds=rows))
    assert p.executor("verify", 8, k + 1) == pytest.approx(0.001 + 0.0001 * 8 * (k + 1), rel=0.03)
    assert p.executor("verify", 8, k + 1, temperature=0.7) == p.executor("verify", 8, k + 1)  # no sampled runs


@pytest.mark.parametrize("recorded", [True, False])
def test_ar_and_sd_overheads_fitted_at_the_live_width_they_forward(recorded):
    """AR / SD close finished rows (row-level refill), so a round forwards its live rows only: the width is the
    round's ``width`` (recorded) or, in older runs with refills, its live count, not the batch's largest."""
    k, ctx, rows = 2, 50.0, []
    for i in range(80):
        live = 4 - i // 20                                   # rows finish and are closed: widths 4, 3, 2, 1
        over = 0.001 + 0.0001 * live * (k + 1)
        row = {"batch_index": 0, "round": i, "t0": i, "t1": i + 1, "batch": live,
               "verify_s": lin_truth(live * (k + 1), live * ctx) + over, "accepted": [0] * live,
               "from_backup": [False] * live, "bonus_rank": [0] * live, "context": [ctx] * live}
        row.update({"width": live} if recorded else {"refill": [i]} if i % 20 == 0 else {})
        rows.append(row)
    p = fit(grid(), Measurements(meta={"spec": {"mode": "sd", "k": k, "temperature": 0.0}}, rounds=rows))
    assert p.executor("verify", 8, k + 1) == pytest.approx(0.001 + 0.0001 * 8 * (k + 1), rel=0.03)
    assert p.executor("verify", 1, k + 1) == pytest.approx(0.001 + 0.0001 * (k + 1), rel=0.03)


def test_sd_at_positive_temperature_pays_the_sampling_the_ssd_runs_measured():
    """Draft-side kinds fitted at T = 0 and T = 0.7 (SSD) give the sampling extra; SD, run only greedy, gets a
    sampled draft step = its greedy one + that extra."""
    from calibration.fit_acceptance import RunRounds
    from calibration.fit_executor import fit_executor_costs

    def rows(**kw):
        return [{"batch_index": 0, "round": i, "t0": 0.0, "t1": 0.0, "batch": 1, "accepted": [0],
                 "from_backup": [False], "context": [10], **kw} for i in range(20)]

    zero = LatencyModel.constant(0.0)
    runs = [RunRounds(k=2, temperature=t, sampler_c=1.0, mode="ssd", budget=4,
                      rounds=rows(glue_s=0.001 + extra, tree_s=2 * (0.002 + extra))) for t, extra in ((0.0, 0), (0.7, 3e-4))]
    runs.append(RunRounds(k=2, temperature=0.0, sampler_c=1.0, mode="sd", rounds=[
        {**r, "t1": 0.005 + 0.002, "verify_s": 0.005} for r in rows()]))
    costs, info = fit_executor_costs(zero, zero, runs, mode="sd")
    assert costs("draft_step", 1, 1, 0.0) == pytest.approx(0.001)
    assert costs("draft_step", 1, 1, 0.7) == pytest.approx(0.001 + 3e-4)
    assert info["sampled.draft_step"]["derived_from"] == "greedy.draft_step"


def test_effective_link_with_a_binding_build_and_a_binding_verification():
    # the draft's forwards (glue + fork + tree = 8.5 ms) bind the 9.2 ms round; verification takes 2 ms
    k, rows, t = 2, [], 0.0
    for i in range(40):
        rows.append({"t0": t, "t1": t + 0.0092, "batch": 1, "verify_s": 0.002, "glue_s": 0.002, "fork_s": 0.0005,
                     "tree_s": 0.006, "draft_reply_s": 0.0005, "backup_s": 0.0, "accepted": [i % 3],
                     "from_backup": [False], "bonus_rank": [0], "context": [50]})
        t += 0.0092
    run = Measurements(meta={"spec": {"mode": "ssd", "k": k, "temperature": 0.0}, "fanout": [2, 2, 2]}, rounds=rows)
    p = fit(grid(), run)  # reply rounds: the 0.7 ms beyond the forwards is the answer's message (build + m)
    assert p.provenance["draft_round"]["n"] == 0 and p.executor.draft_round == {}
    assert p.link_s == pytest.approx(0.0007, rel=0.01)
    c = _costs(p, mode="ssd", k=k, fanout=(2, 2, 2))
    assert c.build(1, 50, 6) + p.link_s == pytest.approx(0.0092, rel=0.03)
    slow = [dict(r, verify_s=0.0089) for r in rows]  # verification + 2 links now bind: the rest is message time
    q = fit(grid(), Measurements(meta=run.meta, rounds=slow))
    assert q.link_s == pytest.approx((0.0092 - 0.0089) / 2, rel=0.02)
    assert q.provenance["draft_round"]["n"] == 0


def test_per_mode_executor_costs_fitted_back():
    """SD and SSD runs with known, different verification times (the draft process slows SSD's target) and
    known SSD message/reply times: each mode's profile carries its own, and simulates the measured round."""
    from saguaro.pipeline import fit_modes
    from saguaro_sim import SpecConfig, Workload
    from saguaro_sim.simulate import simulate

    k, ctx, fan = 4, 100.0, [2, 2, 2, 2, 2]
    v_sd, v_ssd, v_ar = lin_truth(k + 1, ctx) + 0.003, lin_truth(k + 1, ctx) + 0.025, lin_truth(1, ctx) + 0.001
    d_sd = pw_truth(1, ctx) + 0.0005
    msg, reply, hop = 0.0004, 0.0006, 0.0003  # verifier's send, draft's lookup + send, one transport
    wait = hop + reply + hop  # the build (~21 ms) ends within verification (~27 ms): only the reply is waited for

    def rows(period, **kw):
        return [{"batch_index": 0, "round": i, "t0": i * period, "t1": (i + 1) * period, "batch": 1,
                 "accepted": [i % (k + 1)], "from_backup": [False], "bonus_rank": [0], "context": [ctx], **kw}
                for i in range(40)]

    ssd = rows(wait + v_ssd + msg, verify_s=v_ssd, msg_s=msg, wait_s=wait, draft_reply_s=reply, backup_s=0.0,
               glue_s=pw_truth(k + 1, ctx), fork_s=0.0, tree_s=k * pw_truth(2, ctx))
    runs = [Measurements(meta={"spec": {"mode": "ssd", "k": k, "temperature": 0.0}, "fanout": fan}, rounds=ssd),
            Measurements(meta={"spec": {"mode": "sd", "k": k, "temperature": 0.0}},
                         rounds=rows(v_sd + k * d_sd, verify_s=v_sd)),
            Measurements(meta={"spec": {"mode": "ar", "k": 0, "temperature": 0.0}},
                         rounds=rows(v_ar, verify_s=v_ar, accepted=[0]))]
    prof = fit_modes(grid(), runs, "modes", 0.0)
    assert _costs(prof["ssd"], mode="ssd", k=k, fanout=tuple(fan)).verify(1, ctx) == pytest.approx(v_ssd, rel=0.02)
    assert _costs(prof["sd"], mode="sd", k=k).verify(1, ctx) == pytest.approx(v_sd, rel=0.02)
    assert _costs(prof["ar"], mode="ar", k=0).ar_step(1, ctx) == pytest.approx(v_ar, rel=0.02)
    assert _costs(prof["sd"], mode="sd", k=k).draft_step(1, ctx) == pytest.approx(d_sd, rel=0.02)
    assert prof["ssd"].link_s == pytest.approx((msg + wait) / 2, rel=0.02)  # 2 messages = send + wait
    phases = prof["ssd"].provenance["link_executor"]["measured"]
    assert phases["mean_wait_s"] == pytest.approx(wait) and phases["mean_draft_reply_s"] == pytest.approx(reply)
    w = Workload(num_sequences=1, output_tokens=200, prompt_tokens=int(ctx))
    for mode, period in (("ssd", wait + v_ssd + msg), ("sd", v_sd + k * d_sd), ("ar", v_ar)):
        spec = SpecConfig(mode=mode, k=0 if mode == "ar" else k, budget=10, fanout=tuple(fan) if mode == "ssd" else None)
        res = simulate(prof[mode], spec, w, seed=0, protocol="reply")   # the runs used reply
        assert res.sim_time_s / res.rounds == pytest.approx(period, rel=0.05), mode


def _push_rows(n, verify, wait_of, over_of, glue=0.001, fork=0.0003, tree=0.004, msg=0.00015):
    rows, t = [], 0.0
    for i in range(n):
        work = glue + fork + tree
        span = max(work + msg + over_of(i), verify + msg + wait_of(i))
        rows.append({"t0": t, "t1": t + span, "batch": 1, "verify_s": verify, "wait_s": span - verify - msg,
                     "msg_s": msg, "glue_s": glue, "fork_s": fork, "tree_s": tree, "backup_s": 0.0,
                     "accepted": [i % 3], "from_backup": [False], "bonus_rank": [0], "context": [50]})
        t += span
    return rows, t / n


PUSH_META = {"spec": {"mode": "ssd", "k": 2, "temperature": 0.0}, "fanout": [2, 2, 2], "ssd_protocol": "push"}


def test_push_runs_fit_the_draft_round_and_the_send_not_a_verifier_gap():
    """Push-protocol SSD rounds bound by the draft: its own per-round time beyond the forwards and the cache's
    send (0.3 ms, a 3 ms stall in every fifth round) is fitted on the draft side, the verifier's outcome
    send (0.15 ms) as the message time, and no verifier gap (its wait is the draft's); the simulated push
    round then matches the measured mean period."""
    from saguaro_sim import SpecConfig, Workload, simulate

    rows, measured = _push_rows(100, 0.004, lambda i: 0.0, lambda i: 0.0033 if i % 5 == 0 else 0.0003)
    p = fit(grid(), Measurements(meta=PUSH_META, rounds=rows))
    d = p.executor.draft_round
    assert d["median_s"] == pytest.approx(0.0003, rel=0.01)
    assert d["stall_frac"] == pytest.approx(0.2, abs=0.011) and d["stall_s"] == pytest.approx(0.003, rel=0.01)
    assert p.verifier_gap_s == 0.0 and p.provenance["verifier_lookup"]["n"] == 0
    assert p.link_s == pytest.approx(0.00015, rel=0.01)
    spec = SpecConfig(mode="ssd", k=2, fanout=(2, 2, 2), backup="neural")
    hits = p.with_(hits=HitCurve.power_law(0.0, 0.5))            # every round hits, as in the rows
    res = simulate(hits, spec, Workload(num_sequences=1, output_tokens=2000, prompt_tokens=50), seed=0,
                   protocol="push")
    assert res.sim_time_s / res.rounds == pytest.approx(measured, rel=0.05)


def test_push_runs_bound_by_verification_fit_the_verifiers_lookup():
    """Verify-bound push rounds (forwards 5.3 ms, verification 9 ms): the verifier's wait (0.5 ms, receiving
    the cache and looking the outcome up) is its own work: verifier_gap_s, and the simulated round is
    verify + send + lookup."""
    from saguaro_sim import SpecConfig, Workload, simulate

    rows, measured = _push_rows(60, 0.009, lambda i: 0.0005 + 0.0001 * (i % 2), lambda i: 0.0003)
    p = fit(grid(), Measurements(meta=PUSH_META, rounds=rows))
    assert p.verifier_gap_s == pytest.approx(0.00055, abs=6e-5) and p.provenance["draft_round"]["n"] == 0
    assert Profile.from_dict(p.to_dict()).verifier_gap_s == p.verifier_gap_s
    spec = SpecConfig(mode="ssd", k=2, fanout=(2, 2, 2), backup="neural")
    res = simulate(p.with_(hits=HitCurve.power_law(0.0, 0.5)), spec,
                   Workload(num_sequences=1, output_tokens=2000, prompt_tokens=50), seed=0, protocol="push")
    assert res.sim_time_s / res.rounds == pytest.approx(measured, rel=0.03)


def test_push_draft_round_from_the_drafts_own_stamps_not_misaligned_spans():
    """Draft-bound push rounds whose builds alternate 4 / 6 ms: a round's span is the previous build's
    cycle, so span - own forwards swings +-2 ms and the span estimate reads about 1 ms; the draft's own
    hand-off stamps (outcome in hand -> waiting for the next, less the build and the send) give the true
    0.3 ms, and the simulated round matches the measured mean period."""
    from saguaro_sim import SpecConfig, Workload, simulate

    own, msg, n = 0.0003, 0.00015, 80
    f = [0.006 if i % 2 else 0.004 for i in range(n)]
    seen, wait, settle = [0.0], [], []
    for i in range(n):
        settle.append(seen[i] + 1e-5)
        wait.append(seen[i] + f[i] + own + msg)
        seen.append(wait[i] + 5e-5)
    rows = []
    for j in range(1, n):
        span = seen[j] - seen[j - 1]
        hand = {"outcome_seen": (wait[j - 2] if j >= 2 else 0.0, seen[j - 1]),
                "settle": (settle[j - 1], settle[j - 1] + 1e-5), "pack": (settle[j - 1] + f[j - 1] - 1e-4,
                                                                       settle[j - 1] + f[j - 1])}
        rows.append({"t0": seen[j - 1], "t1": seen[j - 1] + span, "batch": 1, "verify_s": 0.003,
                     "wait_s": span - 0.003 - msg, "msg_s": msg, "glue_s": 0.001, "fork_s": 0.0003,
                     "tree_s": f[j] - 0.0013, "backup_s": 0.0, "accepted": [j % 3], "from_backup": [False],
                     "bonus_rank": [0], "context": [50], "handoff": hand})
    p = fit(grid(), Measurements(meta=PUSH_META, rounds=rows))
    d = p.executor.draft_round
    assert d["median_s"] == pytest.approx(own, rel=0.02) and d["stall_frac"] == 0.0
    assert p.provenance["draft_round"]["from"] == ["stamps"]
    spec = SpecConfig(mode="ssd", k=2, fanout=(2, 2, 2), backup="neural")
    res = simulate(p.with_(hits=HitCurve.power_law(0.0, 0.5)), spec,
                   Workload(num_sequences=1, output_tokens=300, prompt_tokens=50), seed=0, protocol="push")
    measured = (rows[-1]["t1"] - rows[1]["t0"]) / (len(rows) - 1)
    assert res.sim_time_s / res.rounds == pytest.approx(measured, rel=0.03)
