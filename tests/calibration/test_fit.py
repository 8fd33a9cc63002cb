"""calibration.fit recovers known parameters from synthetic measurements; profiles round-trip atomically."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fit_helpers import grid, grid_rows, lin_truth, pw_truth, run_meas

from calibration import AcceptanceModel, ConfigError, HitCurve, LatencyModel, Measurements, Profile, fit
from calibration.fit_hits import fit_power_law, hit_table
from calibration.fit_latency import fit_latency


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


def test_acceptance_per_position_and_fast_backup_rounds_ignored():
    rates = (0.9, 0.8, 0.7, 0.6)
    p = fit(grid(), run_meas(rates, n_rounds=2000, backup_frac=0.3, backup="fast"))
    got = p.acceptance.rates(4, 0.0)
    assert np.allclose(got, rates, atol=0.035), got
    info = p.provenance["acceptance_fit"]["by_temperature"]["0.0"]["1.0"]
    assert info["k"] == [4] and 2500 < info["n"] < 3100  # ~30% of 4000 sequence-rounds were the n-gram's


def test_neural_backup_speculations_pooled_with_primary_ones():
    """The neural backup is the draft model too: its speculations count (they follow misses, i.e. hard text,
    so leaving them out overstates what a round accepts). Truth here: backup ones accept per `low`."""
    rates, low = (0.9, 0.8, 0.7, 0.6), (0.5,)
    m = run_meas(rates, n_rounds=2000, backup_frac=0.3, backup_rates=low)
    info = fit(grid(), m).provenance["acceptance_fit"]["by_temperature"]["0.0"]["1.0"]
    assert 3900 < info["n"] <= 4000                      # every steady sequence-round
    pooled_first = 0.7 * 0.9 + 0.3 * 0.5                 # P(position 1 accepted) over both sources
    assert info["rates"][0] == pytest.approx(pooled_first, abs=0.03)


def test_acceptance_per_lookahead_when_several_were_run():
    """Runs at K = 2 and K = 6 at one temperature: a measured K reads its own table, a K between them blends the
    two by distance in K (positions past K = 2 from K = 6 alone: no short table's last rate repeated), the
    largest beyond them all."""
    short, long = (0.95, 0.9), (0.6, 0.6, 0.6, 0.6, 0.6, 0.6)
    p = fit(grid(), run_meas(short, k=2, seed=4), run_meas(long, k=6, seed=5))
    acc = p.acceptance
    assert sorted(acc.by_k[0.0]) == [2, 6]
    assert acc.rates(1, 0.0) == pytest.approx(short[:1], abs=0.03)
    assert acc.rates(2, 0.0) == pytest.approx(short, abs=0.03)
    mid = (0.75 * 0.95 + 0.25 * 0.6, 0.75 * 0.9 + 0.25 * 0.6, 0.6)  # K = 3: 1/4 of the way from K = 2 to 6
    assert acc.rates(3, 0.0) == pytest.approx(mid, abs=0.04)
    assert acc.expected_tokens(3, 0.0) == pytest.approx(1 + mid[0] * (1 + mid[1] * (1 + mid[2])), abs=0.06)
    assert len(acc.rates(8, 0.0)) == 8 and acc.mean_alpha(8, 0.0) == pytest.approx(0.6, abs=0.03)
    assert AcceptanceModel.from_dict(acc.to_dict()) == acc


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


def test_single_token_single_row_forwards_keep_their_measured_ratio():
    """A grid linear in total tokens but whose one-row, one-token points run 20% below the line (a
    matrix-vector product): the fit scales exactly those (within 2%), leaves the rest on the line, and the
    ratio survives the profile's JSON; a ratio of 0 is refused, naming the field."""
    from calibration.fit_latency import fit_latency
    from calibration.latency import LatencyModel

    def t(b, n, c):
        return (0.8 if b * n == 1 else 1.0) * (1e-3 + 5e-5 * b * n + 1e-7 * b * c)

    rows = [{"who": "target", "batch": b, "new_tokens": n, "context": c, "median_s": t(b, n, c)}
            for b in (1, 2, 4, 8) for n in (1, 3, 5, 9) for c in (48, 96, 144)]
    model, info = fit_latency(rows)      # noise-free, a hinge may take it; the ratio covers what it leaves
    assert model(1, 1, 96) == pytest.approx(t(1, 1, 96), rel=0.02) and "single_ratio" in info
    assert model(4, 5, 96) == pytest.approx(t(4, 5, 96), rel=0.05)
    from calibration.fit_latency import latency_arrays, with_single_ratio
    line = LatencyModel.linear(1e-3, 5e-5, 1e-7)                    # the straight line alone
    model, info = with_single_ratio(line, *latency_arrays(rows), {})
    assert info["single_ratio"] == pytest.approx(0.8, rel=1e-6)
    assert model(1, 1, 96) == pytest.approx(t(1, 1, 96), rel=1e-6) and model(2, 1, 96) == line(2, 1, 96)
    back = LatencyModel.from_dict(model.to_dict())
    assert back(1, 1, 96) == model(1, 1, 96)
    with pytest.raises(ConfigError, match="single_ratio"):
        LatencyModel("linear", {"base": 1e-3, "per_token": 0.0, "single_ratio": 0.0})
