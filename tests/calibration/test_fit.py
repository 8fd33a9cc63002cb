"""calibration.fit recovers known parameters from synthetic measurements; profiles round-trip atomically."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibration import AcceptanceModel, ConfigError, HitCurve, LatencyModel, Measurements, Profile, fit
from calibration.fit_hits import fit_power_law, hit_table
from calibration.fit_latency import fit_latency


def grid_rows(who, fn, seed=0, noise=0.01):
    rng = np.random.default_rng(seed)
    rows = []
    for b in (1, 2, 4):
        for n in (1, 2, 4, 8, 16, 32):
            for ctx in (16, 128, 512):
                y = fn(b * n, b * ctx) * float(np.exp(rng.normal(0, noise)))
                rows.append({"who": who, "batch": b, "new_tokens": n, "context": ctx, "median_s": y,
                             "p10_s": y * 0.98, "p90_s": y * 1.02, "n": 5})
    return rows


def sample_rounds(rates, k, n_rounds, batch, seed, c=0.3, r=0.5, c_b=0.6, r_b=0.4, top_n=64, backup_frac=0.0):
    """Round rows with accepted lengths from per-position `rates` and bonus ranks from miss(F) = c F^-r."""
    rng = np.random.default_rng(seed)

    def rank(cc, rr):
        u = rng.uniform()
        rk = int(np.ceil((cc / u) ** (1 / rr))) - 1 if u < cc else 0
        return rk if rk < top_n else -1

    rows = []
    for i in range(n_rounds):
        acc, ranks, back = [], [], []
        for _ in range(batch):
            b = bool(rng.uniform() < backup_frac)
            a = 0
            while not b and a < k and rng.uniform() < rates[min(a, len(rates) - 1)]:
                a += 1
            acc.append(a)
            back.append(b)
            ranks.append(rank(c_b, r_b) if b else rank(c, r))
        rows.append({"round": i, "batch": batch, "verify_s": 0.01, "accepted": acc, "hit": [True] * batch,
                     "from_backup": back, "bonus_rank": ranks, "context": [100] * batch})
    return rows


def run_meas(rates, k=4, temperature=0.0, sampler_c=1.0, n_rounds=1500, batch=2, seed=1, **kw):
    spec = {"mode": "ssd", "k": k, "temperature": temperature, "sampler_c": sampler_c, "backup": "neural"}
    return Measurements(meta={"spec": spec, "top_n": 64, "target": "t", "draft": "d"},
                        rounds=sample_rounds(rates, k, n_rounds, batch, seed, **kw))


def lin_truth(x, z):
    return 0.002 + 3e-5 * x + 2e-7 * z


def pw_truth(x, z):
    return 0.004 + 1.5e-4 * max(0.0, x - 32) + 1e-7 * z


def grid():
    return Measurements(meta={"device": "cpu"}, latency=grid_rows("target", lin_truth) + grid_rows("draft", pw_truth, 1),
                        link=[{"bytes": b, "round_trip_s": 2 * (1e-4 + b / 1e9)} for b in (64, 4096, 65536, 1 << 20)])


def test_linear_latency_coefficients_recovered():
    model, info = fit_latency(grid_rows("target", lin_truth, noise=0.005))
    assert info["form"] == "linear" and info["n"] == 54
    p = model.params
    assert p["base"] == pytest.approx(0.002, rel=0.03)
    assert p["per_token"] == pytest.approx(3e-5, rel=0.03)
    assert p["per_context"] == pytest.approx(2e-7, rel=0.05)
    assert info["cv_mape"] < 0.02


def test_piecewise_latency_found_and_extrapolates():
    model, info = fit_latency(grid_rows("draft", pw_truth, noise=0.005))
    assert info["form"] == "piecewise" and 32.0 in info["knots"]
    assert info["cv_mape"] < 0.03
    for b, n, ctx in ((1, 3, 300), (4, 24, 50), (8, 32, 1000)):  # off-grid, incl. beyond the grid
        assert model(b, n, ctx) == pytest.approx(pw_truth(b * n, b * ctx), rel=0.04)


def test_acceptance_per_position_and_backup_rounds_ignored():
    rates = (0.9, 0.8, 0.7, 0.6)
    p = fit(grid(), run_meas(rates, n_rounds=2000, backup_frac=0.3))
    got = p.acceptance.rates(4, 0.0)
    assert np.allclose(got, rates, atol=0.035), got
    info = p.provenance["acceptance_fit"]["by_temperature"]["0.0"]["1.0"]
    assert info["k"] == [4] and 2500 < info["n"] < 3100  # ~30% of 4000 sequence-rounds were backup ones


def test_temperature_kept_from_meta():
    p = fit(grid(), run_meas((0.9,), temperature=0.0, seed=2), run_meas((0.5,), temperature=0.7, seed=3))
    assert p.acceptance.mean_alpha(4, 0.0) == pytest.approx(0.9, abs=0.03)
    assert p.acceptance.mean_alpha(4, 0.7) == pytest.approx(0.5, abs=0.03)
    assert set(p.hits.by_temperature) == {0.0, 0.7}


def test_power_law_recovered_with_goodness_of_fit():
    p = fit(grid(), run_meas((0.8,), n_rounds=4000, backup_frac=0.25, seed=4))
    prim = p.hits.by_temperature[0.0]["primary"]
    back = p.hits.by_temperature[0.0]["backup"]
    assert prim["c"] == pytest.approx(0.3, rel=0.08) and prim["r"] == pytest.approx(0.5, rel=0.08)
    assert back["c"] == pytest.approx(0.6, rel=0.08) and back["r"] == pytest.approx(0.4, rel=0.1)
    info = p.provenance["hits_fit"]["by_temperature"]["0.0"]["1.0"]["primary"]
    assert info["r2"] > 0.95
    # empirical tables: hit(F) = P(rank < F), rejections by position 0..K-1, all-accepted on its own
    assert len(prim["table"]) == 4 and prim["table"][0][0] == 0.0 and prim["final"][0] == 0.0
    assert p.hits.hit(4, position=1) == pytest.approx(1 - 0.3 * 4 ** -0.5, abs=0.03)
    assert p.hits.hit(4, position=1, backup=True) == pytest.approx(1 - 0.6 * 4 ** -0.4, abs=0.05)


def test_power_law_helpers_exact():
    f = np.arange(1, 33)
    hit = np.concatenate([[0.0], 1 - 0.4 * f ** -0.6])
    law = fit_power_law(hit, 1000)
    assert law["c"] == pytest.approx(0.4) and law["r"] == pytest.approx(0.6) and law["r2"] == pytest.approx(1.0)
    assert hit_table([(0, 0), (0, 2), (1, -1), (0, 5)], 4).tolist() == [0.0, 0.25, 0.25, 0.5, 0.5]


def test_c_effect_tradeoff_from_runs_at_several_c():
    hi = run_meas((0.8,), sampler_c=1.0, n_rounds=2000, seed=5)
    lo = run_meas((0.6,), sampler_c=0.5, n_rounds=2000, seed=6, c=0.15)
    p = fit(grid(), hi, lo)
    assert p.acceptance.c_effect[0.5] == pytest.approx(0.75, abs=0.05)
    assert p.hits.c_effect[0.5] == pytest.approx(0.5, abs=0.12)
    assert p.acceptance.mean_alpha(4, 0.0, 0.5) < p.acceptance.mean_alpha(4, 0.0, 1.0)
    assert p.hits.hit(2, 0, sampler_c=0.5) > p.hits.hit(2, 0, sampler_c=1.0)
    trade = p.provenance["c_tradeoff"]
    assert [r["sampler_c"] for r in trade] == [0.5, 1.0] and trade[0]["hit_f1"] > trade[1]["hit_f1"]


def test_link_and_provenance():
    p = fit(grid(), run_meas((0.8,)), name="synthetic")
    assert p.name == "synthetic"
    assert p.link_s == pytest.approx(1e-4, rel=0.02) and p.link_bytes_per_s == pytest.approx(1e9, rel=0.02)
    prov = p.provenance
    assert prov["target_fit"]["form"] == "linear" and prov["draft_fit"]["form"] == "piecewise"
    assert prov["target_fit"]["n"] == 54 and prov["target_fit"]["cv_mape"] < 0.05
    assert prov["samples"]["runs"] == 1 and prov["samples"]["rounds"] == 1500
    assert prov["models"] == {"target": "t", "draft": "d"} and prov["git_commit"] and prov["date"]


def test_profile_json_atomic_round_trip(tmp_path):
    p = fit(grid(), run_meas((0.8,)))
    path = tmp_path / "prof.json"
    p.to_json(path)
    q = Profile.from_json(path)
    assert q.to_dict() == json.loads(json.dumps(p.to_dict()))
    assert q.target(2, 5, 100) == pytest.approx(p.target(2, 5, 100))
    assert q.hits.hit(3, 2) == pytest.approx(p.hits.hit(3, 2))
    bad = p.with_(provenance={"oops": object()})  # not serializable: the write fails midway
    with pytest.raises(TypeError):
        bad.to_json(path)
    assert [f.name for f in tmp_path.iterdir()] == ["prof.json"]  # no temp file left, old file intact
    assert Profile.from_json(path).to_dict() == q.to_dict()


def test_base_profile_fills_missing_parts_and_errors_name_fields():
    base = Profile("b", LatencyModel.constant(0.01), LatencyModel.constant(0.001),
                   acceptance=AcceptanceModel.geometric(0.7), hits=HitCurve.power_law(0.2, 0.5))
    p = fit(grid(), base=base)
    assert p.acceptance.mean_alpha(4) == pytest.approx(0.7) and p.provenance["hits_fit"]["base"] == "b"
    with pytest.raises(ConfigError, match="measurements.rounds"):
        fit(grid())
    with pytest.raises(ConfigError, match="measurements"):
        fit()
    with pytest.raises(ConfigError, match=r"meta.spec"):
        fit(grid(), Measurements(rounds=[{"accepted": [1]}]))
    rows = grid_rows("target", lin_truth)
    rows[3]["median_s"] = 0.0
    with pytest.raises(ConfigError, match=r"latency\[target\]\[3\].*median_s > 0"):
        fit(Measurements(latency=rows + grid_rows("draft", pw_truth)), base=base)


def test_sd_rank_at_position_k_is_unknown_not_a_miss():
    k = 3
    rounds = [{"accepted": [k, 0], "bonus_rank": [-1, 0]} for _ in range(100)]  # SD: no draft row at K
    sd = Measurements(meta={"spec": {"mode": "sd", "k": k, "temperature": 0.0}}, rounds=rounds)
    p = fit(grid(), sd)
    assert p.hits.hit(1, position=0) == pytest.approx(1.0)
    assert p.provenance["hits_fit"]["by_temperature"]["0.0"]["1.0"]["primary"]["n"] == 100


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


def _ranked_run(k, n=400, final_rank=0, reject_rank=3, temperature=0.0):
    rows = [{"accepted": [i % (k + 1)], "from_backup": [False],
             "bonus_rank": [final_rank if i % (k + 1) == k else reject_rank]} for i in range(n)]
    return Measurements(meta={"spec": {"mode": "ssd", "k": k, "temperature": temperature}}, rounds=rows)


def test_all_accepted_outcomes_get_their_own_entry_read_at_any_k():
    p = fit(grid(), _ranked_run(3))
    assert p.hits.hit(1, position=3, k=3) > 0.95  # all accepted: the draft's top token
    assert p.hits.hit(1, position=1, k=3) < 0.05 and p.hits.hit(4, position=1, k=3) > 0.95  # rejection: rank 3
    q = fit(grid(), _ranked_run(3), _ranked_run(5))
    # a K = 3 config reads the all-accepted entry at 3 (fitted from both runs), not K = 5's rejection row 3
    assert q.hits.hit(1, position=3, k=3) > 0.95 and q.hits.hit(1, position=3, k=5) < 0.05
    assert q.hits.hit(1, position=5, k=5) > 0.95 and q.hits.hit(1, position=2, k=2) > 0.95  # smaller K too
    info = q.provenance["hits_fit"]["by_temperature"]["0.0"]["1.0"]["primary"]
    assert info["final_ks"] == [3, 5] and info["final_n"] == 400 // 4 + 400 // 6 and info["final_hit"][1] == 1.0
    assert len(q.hits.by_temperature[0.0]["primary"]["table"]) == 5  # rejection rows 0..4 only


def test_all_accepted_entry_recovered_per_temperature():
    """Known all-accepted hit curves (rank 0 w.p. 0.9 at T = 0, 0.6 at T = 0.7; else rank 5) come back."""
    rng = np.random.default_rng(7)

    def run(k, t, p_top, n=1200):
        rows = []
        for _ in range(n):
            a = int(rng.integers(0, k + 1))
            rank = (0 if rng.uniform() < p_top else 5) if a == k else 9
            rows.append({"accepted": [a], "from_backup": [False], "bonus_rank": [rank]})
        return Measurements(meta={"spec": {"mode": "ssd", "k": k, "temperature": t}}, rounds=rows)

    p = fit(grid(), run(6, 0.0, 0.9), run(2, 0.0, 0.9), run(6, 0.7, 0.6), run(2, 0.7, 0.6))
    for t, p_top in ((0.0, 0.9), (0.7, 0.6)):
        for k in (2, 4, 6):  # K = 4 was never calibrated: it reads the same entry
            assert p.hits.hit(1, k, t, k=k) == pytest.approx(p_top, abs=0.05)
            assert p.hits.hit(6, k, t, k=k) == pytest.approx(1.0)
            assert p.hits.hit(6, k - 1, t, k=k) == pytest.approx(0.0, abs=1e-9)  # rejections: rank 9
    old = HitCurve.from_dict({"by_temperature": {"0.0": {"primary": {"c": 0.3, "r": 0.5, "table": [[0, 0.2, 0.4]]}}}})
    assert old.hit(2, 3, k=3) == pytest.approx(0.4)  # no all-accepted entry: the table row as before


def test_fallback_rounds_are_left_out_of_the_fit():
    """Rounds finished in-process after a draft fault measure the fallback, not the configuration."""
    from calibration.fit import run_of

    spec = {"mode": "ssd", "k": 2, "temperature": 0.0}
    good = {"round": 0, "accepted": [2], "hit": [True], "from_backup": [False], "bonus_rank": [0]}
    bad = {"round": 1, "accepted": [0], "hit": [None], "from_backup": [True], "bonus_rank": [-1], "fallback": "sd"}
    run = run_of(Measurements(meta={"spec": spec}, rounds=[good, bad, good]))
    assert len(run.rounds) == 2 and all("fallback" not in r for r in run.rounds)
    assert run_of(Measurements(meta={"spec": spec}, rounds=[bad])) is None


def _fast_run(k, t, rates, n_rounds=1500, seed=11, backup_frac=0.4):
    """SSD run with the fast backup: backup speculations accepted per position with conditional `rates`."""
    rng = np.random.default_rng(seed)
    rows = [{"batch_index": 0, "accepted": [k, k], "from_backup": [True, True], "bonus_rank": [0, 0]}]  # first
    for _ in range(n_rounds):
        acc, back = [], []
        for _ in range(2):
            b = bool(rng.uniform() < backup_frac)
            probs = rates if b else (0.9,)
            a = 0
            while a < k and rng.uniform() < probs[min(a, len(probs) - 1)]:
                a += 1
            acc.append(a)
            back.append(b)
        rows.append({"batch_index": 0, "accepted": acc, "from_backup": back, "bonus_rank": [0, 0]})
    spec = {"mode": "ssd", "k": k, "temperature": t, "backup": "fast"}
    return Measurements(meta={"spec": spec, "backup_resolved": "fast"}, rounds=rows)


def test_fast_backup_acceptance_recovered_per_position_and_temperature():
    p = fit(grid(), _fast_run(4, 0.7, (0.3, 0.8)), _fast_run(6, 0.7, (0.3, 0.8), seed=12),
            _fast_run(4, 0.0, (0.5,), seed=13))
    fba = p.fast_backup_acceptance
    assert fba is not None
    assert fba.rates(4, 0.7) == pytest.approx([0.3, 0.8, 0.8, 0.8], abs=0.05)
    assert fba.rates(3, 0.0) == pytest.approx([0.5, 0.5, 0.5], abs=0.05)
    info = p.provenance["fast_backup_fit"]["by_temperature"]["0.7"]
    runs = [_fast_run(4, 0.7, (0.3, 0.8)), _fast_run(6, 0.7, (0.3, 0.8), seed=12)]
    n_backup = sum(sum(r["from_backup"]) for m in runs for r in m.rounds[1:])
    assert info["k"] == [4, 6] and info["n"] == n_backup  # each batch's first round (the first speculation) left out
    assert p.acceptance.rates(4, 0.7)[0] == pytest.approx(0.9, abs=0.03)  # primaries are not mixed in
    q = Profile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert q.fast_backup_acceptance == fba
    # neural-backup runs hold no fast-backup speculations: nothing fitted, the base's (if any) kept
    neural = fit(grid(), run_meas((0.8,), backup_frac=0.3))
    assert neural.fast_backup_acceptance is None and "fast_backup_acceptance" not in neural.to_dict()
    assert fit(grid(), base=p).fast_backup_acceptance == fba


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


def test_fast_backup_tail_pooled_past_the_well_sampled_positions():
    from calibration.fit_acceptance import RunRounds, fit_fast_backup

    lengths = [0] * 68 + [1] * 6 + [5] * 2  # the real K = 6, T = 0.7 calibration run's fast-backup histogram
    rows = [{"accepted": [6], "from_backup": [True]}] + [{"accepted": [a], "from_backup": [True]} for a in lengths]
    model, info = fit_fast_backup([RunRounds(k=6, temperature=0.7, sampler_c=1.0, backup="fast", rounds=rows)])
    # positions 1, 2 well sampled (8/76, 2/8); 3..6 pooled: 2 + 2 + 2 + 0 accepted of 2 + 2 + 2 + 2 tried
    assert model.by_temperature[0.7] == pytest.approx((8 / 76, 2 / 8, 6 / 8))
    assert info["by_temperature"]["0.7"]["n"] == 76
    neural = RunRounds(k=6, temperature=0.7, sampler_c=1.0, backup="neural", rounds=rows)
    assert fit_fast_backup([neural])[0] is None


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
