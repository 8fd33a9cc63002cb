"""The discrete-event simulator agrees with the closed forms where their assumptions hold, and behaves sanely."""

import json

import numpy as np
import pytest

from calibration import AcceptanceModel, ConfigError, HitCurve, LatencyModel, Profile
from saguaro_sim import SpecConfig, Workload
from saguaro_sim.analytic import predict, ssd_speedup
from saguaro_sim.simulate import SimResult, simulate

W = Workload(num_sequences=64, output_tokens=512, prompt_tokens=64)


def toy(alpha=0.75, draft=0.001, target=0.02, c=0.45, r=0.5, c_backup=None, fast_s=0.0003, link=0.0):
    """Constant latencies, i.i.d. acceptance, zero link: the closed forms' assumptions."""
    return Profile(name="toy", target=LatencyModel.constant(target), draft=LatencyModel.constant(draft),
                   link_s=link, acceptance=AcceptanceModel.geometric(alpha),
                   hits=HitCurve.power_law(c, r, c_backup=c_backup), fast_backup_s=fast_s)


GRID = [
    ("sd", 1, "neural", 0.75), ("sd", 8, "neural", 0.6),
    ("ssd", 1, "neural", 0.75), ("ssd", 1, "fast", 0.75), ("ssd", 1, "neural", 0.5),
    ("ssd", 4, "neural", 0.8), ("ssd", 8, "fast", 0.7), ("ssd", 16, "neural", 0.75), ("ssd", 16, "fast", 0.75),
]


@pytest.mark.parametrize("mode,batch,backup,alpha", GRID)
def test_simulator_matches_closed_forms_within_2pct(mode, batch, backup, alpha):
    p = toy(alpha=alpha, c_backup=0.6)
    spec = SpecConfig(mode=mode, k=4, budget=20, batch_size=batch, backup=backup)
    sim = simulate(p, spec, W, seed=1)
    pred = predict(p, spec, W)
    assert sim.tokens_per_s_per_seq == pytest.approx(pred.tokens_per_s_per_seq, rel=0.02)
    assert sim.tokens_per_round == pytest.approx(pred.tokens_per_round, rel=0.02)
    if mode == "ssd":
        assert sim.hit_rate == pytest.approx(pred.p_hit, abs=0.02)
        # and the closed form is Theorem 7 / Corollary 16 itself (normalized by T_v)
        e = AcceptanceModel.geometric(alpha).expected_tokens(4)
        theorem = ssd_speedup(pred.p_hit, e, e if backup == "neural" else 1.0, pred.t_p_s / 0.02,
                              pred.t_b_s / 0.02, batch=batch)
        assert sim.tokens_per_s_per_seq * 0.02 == pytest.approx(theorem, rel=0.02)


def test_verifier_waits_when_cache_building_is_slower_than_verification():
    p = toy(draft=0.006)  # T_p = (1 + K) * 0.006 = 0.03 > T_v = 0.02
    spec = SpecConfig(mode="ssd", k=4, budget=20)
    sim = simulate(p, spec, W, seed=2)
    pred = predict(p, spec, W)
    assert pred.t_p_s > pred.t_verify_s
    assert sim.tokens_per_s_per_seq == pytest.approx(pred.tokens_per_s_per_seq, rel=0.02)
    assert sim.verifier_idle_frac > 0.3  # at least 1 - T_v / T_p of the time the verifier waits
    assert sim.draft_utilization > 0.95


def test_ssd_with_zero_hits_and_neural_backup_equals_sd():
    p = toy().with_(hits=HitCurve.power_law(c=1.0, r=0.0))
    for batch in (1, 8):
        sd = simulate(p, SpecConfig(mode="sd", k=4, batch_size=batch), W, seed=3)
        ssd = simulate(p, SpecConfig(mode="ssd", k=4, budget=20, batch_size=batch), W, seed=3)
        assert ssd.hit_rate == 0.0
        assert ssd.tokens_per_s_per_seq == pytest.approx(sd.tokens_per_s_per_seq, rel=0.02)


def test_slower_draft_never_speeds_up_sd():
    prev = float("inf")
    for draft in (0.0005, 0.001, 0.002, 0.004):
        r = simulate(toy(draft=draft), SpecConfig(mode="sd", k=4), Workload(16, 256), seed=4)
        assert r.tokens_per_s_per_seq < prev
        prev = r.tokens_per_s_per_seq


def test_more_budget_raises_simulated_hit_rate():
    rates = [simulate(toy(), SpecConfig(mode="ssd", k=4, budget=b, batch_size=8), W, seed=5).hit_rate
             for b in (5, 20, 80)]
    assert rates[0] + 0.05 < rates[1] < rates[2]


def test_batch_synchronous_misses_slow_every_sequence():
    p = toy()
    r1 = simulate(p, SpecConfig(mode="ssd", k=4, budget=20, batch_size=1), W, seed=6)
    r16 = simulate(p, SpecConfig(mode="ssd", k=4, budget=20, batch_size=16), W, seed=6)
    assert r16.tokens_per_s_per_seq < 0.95 * r1.tokens_per_s_per_seq
    assert r16.throughput > 10 * r1.throughput


def test_deterministic_per_seed():
    p, spec = toy(), SpecConfig(mode="ssd", k=4, budget=20, batch_size=4)
    a = simulate(p, spec, Workload(16, 256), seed=11).to_dict()
    b = simulate(p, spec, Workload(16, 256), seed=11).to_dict()
    c = simulate(p, spec, Workload(16, 256), seed=12).to_dict()
    for d in (a, b, c):
        d.pop("wall_s")
    assert a == b
    assert a != c


def test_ar_is_one_token_per_round():
    p = toy()
    r = simulate(p, SpecConfig(mode="ar", k=0, budget=0, batch_size=4), Workload(8, 100), seed=0)
    assert r.tokens_per_round == 1.0 and r.tokens == 800
    assert r.tokens_per_s_per_seq == pytest.approx(50.0)
    assert r.rounds == 200  # two consecutive groups of 4 sequences, 100 steps each


def test_result_fields_and_every_sequence_accounted():
    r = simulate(toy(), SpecConfig(mode="ssd", k=4, budget=20, batch_size=4), Workload(10, 200), seed=0)
    assert isinstance(r, SimResult)
    assert r.tokens == 10 * 200
    assert len(r.per_seq_tokens_per_s) == 10 and all(np.isfinite(r.per_seq_tokens_per_s))
    assert r.tokens_per_s_per_seq == pytest.approx(np.mean(r.per_seq_tokens_per_s))
    assert 0 <= r.verifier_idle_frac < 1 and 0 < r.draft_utilization <= 1
    d = r.to_dict()
    assert "events" not in d and json.loads(json.dumps(d))["mode"] == "ssd"


def test_chrome_trace_parses_and_has_both_tracks(tmp_path):
    spec = SpecConfig(mode="ssd", k=4, budget=20, batch_size=2, draft_devices=2)
    r = simulate(toy(link=0.0005), spec, Workload(4, 64), seed=0, trace=True)
    path = r.to_chrome_trace(tmp_path / "sim.json")
    doc = json.loads(open(path).read())
    assert doc["displayTimeUnit"] == "ms"
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"verifier", "speculator 0", "speculator 1", "link"} <= names
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {"verify", "build cache", "speculation", "outcome"} <= {e["name"] for e in spans}
    tid = {e["args"]["name"]: e["tid"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    verify = sorted((e["ts"], e["dur"]) for e in spans if e["tid"] == tid["verifier"])
    assert len(verify) == r.rounds
    assert all(t0 + d0 <= t1 + 1e-6 for (t0, d0), (t1, _) in zip(verify, verify[1:]))  # one verify at a time
    assert verify[-1][0] + verify[-1][1] == pytest.approx(r.sim_time_s * 1e6)


def test_trace_requires_events(tmp_path):
    r = simulate(toy(), SpecConfig(mode="sd", k=2), Workload(2, 32))
    with pytest.raises(ConfigError, match="^trace:"):
        r.to_chrome_trace(tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("kw,field", [({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"), ({"spec": "ssd"}, "spec"),
                                      ({"profile": {}}, "profile"), ({"workload": 16}, "workload")])
def test_bad_input_names_the_field(kw, field):
    args = {"profile": toy(), "spec": SpecConfig(), "workload": Workload(2, 8), "seed": 0}
    args.update(kw)
    with pytest.raises(ConfigError, match=f"^{field}:"):
        simulate(**args)


def test_push_protocol_removes_the_round_trip_on_hits_only():
    """push: an all-hit round costs the verification and the verifier's outcome send (the cache arrived
    during it), reply: also the answer's send (21 vs 22 ms); when every round misses both wait for the
    backup speculation, so they agree."""
    w = Workload(num_sequences=8, output_tokens=256, prompt_tokens=64)
    spec = SpecConfig(mode="ssd", k=4, budget=20, batch_size=1, backup="neural")
    hits = toy(c=0.0, link=0.001)                      # every bonus token cached
    reply, push = (simulate(hits, spec, w, seed=3, protocol=p) for p in ("reply", "push"))
    assert reply.hit_rate > 0.99 and push.hit_rate > 0.99
    assert push.tokens_per_round == pytest.approx(reply.tokens_per_round, rel=0.02)
    assert push.tokens_per_s_per_seq / reply.tokens_per_s_per_seq == pytest.approx(0.022 / 0.021, rel=0.01)
    misses = toy(c=1.0, r=0.0, link=0.001)             # nothing cached: every round takes the backup
    reply, push = (simulate(misses, spec, w, seed=3, protocol=p) for p in ("reply", "push"))
    assert push.hit_rate < 0.01
    assert push.tokens_per_s_per_seq == pytest.approx(reply.tokens_per_s_per_seq, rel=0.01)
    with pytest.raises(ConfigError, match="protocol"):
        simulate(hits, spec, w, protocol="tcp")


def test_verifier_gap_costs_every_round_once():
    """profile.verifier_gap_s (the push verifier's own lookup between verifications) adds itself to each
    all-hit round: 20 ms verification + 2 ms gap -> 22 ms rounds."""
    w = Workload(num_sequences=8, output_tokens=256, prompt_tokens=64)
    spec = SpecConfig(mode="ssd", k=4, budget=20, batch_size=1, backup="neural")
    base = toy(c=0.0)
    gapped = Profile.from_dict({**base.to_dict(), "verifier_gap_s": 0.002})
    plain, slow = (simulate(p, spec, w, seed=3, protocol="push") for p in (base, gapped))
    assert plain.tokens_per_s_per_seq / slow.tokens_per_s_per_seq == pytest.approx(0.022 / 0.020, rel=0.02)


def _with_executor(p, draft_round=None):
    from calibration.overheads import ExecutorCosts

    lines = {"verify": [0.002, 1e-4], "glue": [0.0005, 0.0], "fork": [0.0003, 2e-5], "tree_step": [0.0002, 3e-5],
             "backup_step": [0.0001, 0.0], "draft_step": [0.0004, 0.0]}
    return p.with_(executor=ExecutorCosts(lines={"greedy": lines}, draft_round=draft_round or {}))


@pytest.mark.parametrize("protocol", ["push", "reply"])
@pytest.mark.parametrize("draft,batch,backup", [(0.001, 1, "neural"), (0.001, 4, "fast"), (0.005, 1, "neural"),
                                                 (0.005, 2, "neural")])
def test_closed_forms_match_the_simulation_with_executor_costs(protocol, draft, batch, backup):
    """Per-kind executor overheads (linear in the batch width), a draft per-round time with a stall tail, a
    link, the push verifier's lookup, both protocols, verify-bound (draft 1 ms) and build-bound (draft 5 ms):
    the closed forms' mean
    round agrees with the simulation within 2% (stalls only where the build binds: the mean then adds)."""
    stalls = {"median_s": 0.0004, "stall_s": 0.003, "stall_frac": 0.2} if draft > 0.002 else {"median_s": 0.0004}
    p = _with_executor(toy(alpha=0.75, draft=draft, c_backup=0.6, link=0.0003), stalls).with_(verifier_gap_s=0.0005)
    spec = SpecConfig(mode="ssd", k=4, budget=20, batch_size=batch, backup=backup)
    sim = simulate(p, spec, W, seed=1, protocol=protocol)
    pred = predict(p, spec, W, protocol=protocol)
    assert sim.resolved["protocol"] == protocol
    assert sim.tokens_per_s_per_seq == pytest.approx(pred.tokens_per_s_per_seq, rel=0.02)
    bare = simulate(toy(alpha=0.75, draft=draft, c_backup=0.6, link=0.0003), spec, W, seed=1, protocol=protocol)
    assert sim.tokens_per_s_per_seq < bare.tokens_per_s_per_seq      # the executor's costs slow it down


def test_sd_costs_come_from_the_executor_lines():
    p = _with_executor(toy(alpha=0.75))
    spec = SpecConfig(mode="sd", k=3, batch_size=2)
    sim, pred = simulate(p, spec, W, seed=0), predict(p, spec, W)
    want = 3 * (0.001 + 0.0004) + (0.02 + 0.002 + 1e-4 * 2 * 4)   # 3 draft steps + verify(b=2, K+1=4)
    assert pred.round_time_s == pytest.approx(want)
    assert sim.tokens_per_s_per_seq == pytest.approx(pred.tokens_per_s_per_seq, rel=0.02)


def test_fixed_batches_ride_along_and_cost_the_full_width():
    """batching="fixed": a finished row keeps its slot (forwards stay at the batch's width) until the batch
    ends; with a width-dependent verify, fixed batches are slower than refilled ones at equal work."""
    p = toy(alpha=0.75).with_(target=LatencyModel.linear(0.01, 0.002))
    spec = SpecConfig(mode="sd", k=3, batch_size=4)
    w = Workload(num_sequences=8, output_tokens=64, prompt_tokens=16)
    fixed, cont = (simulate(p, spec, w, seed=0, batching=b) for b in ("fixed", "continuous"))
    assert fixed.tokens == cont.tokens == 8 * 64
    assert fixed.sim_time_s > cont.sim_time_s
    assert fixed.tokens_per_round == pytest.approx(cont.tokens_per_round, rel=0.03)
    with pytest.raises(ConfigError, match="^batching:"):
        simulate(p, spec, w, batching="dynamic")


def test_kept_rows_refill_in_place_and_forward_up_to_the_last_live_one():
    """batching="kept" (SSD over a tensor-parallel target, whose cache rows cannot move; before session 28 every SSD run): finished rows take the
    next request while one waits, then stay, and each verification covers the slots up to the last live one
    (never narrower than "continuous", which closes every finished row); "fixed" also idles rows until the
    whole batch ends."""
    p = toy(alpha=0.75).with_(target=LatencyModel.linear(0.01, 0.002))
    spec = SpecConfig(mode="ssd", k=3, budget=8, batch_size=4)
    w = Workload(num_sequences=6, output_tokens=48, prompt_tokens=16)
    runs = {b: simulate(p, spec, w, seed=0, batching=b, trace=True) for b in ("continuous", "kept", "fixed")}
    widths = {b: [e["args"]["batch"] for e in r.events if e["name"] == "verify"] for b, r in runs.items()}
    assert max(widths["kept"]) == 4 and min(widths["kept"]) < 4
    assert len(widths["kept"]) == len(widths["continuous"])                 # the same rounds, kept ones wider
    assert all(k >= c for k, c in zip(widths["kept"], widths["continuous"]))
    assert all(r.tokens == 6 * 48 for r in runs.values())
    assert runs["continuous"].sim_time_s < runs["kept"].sim_time_s < runs["fixed"].sim_time_s


@pytest.mark.parametrize("pairs,period", [(((0.8, 1.2), (1.2, 0.8)), 0.024), (((0.8, 0.8), (1.2, 1.2)), 0.020),
                                          ((), 0.020)])
def test_round_jitter_costs_where_both_sides_balance(pairs, period):
    """Verification and build both 20 ms: with opposite per-round multipliers every round lasts the longer
    side (1.2 x 20 ms); multipliers moving together, or none, keep the 20 ms mean; the profile keeps them."""
    from calibration.overheads import ExecutorCosts

    p = toy(draft=0.005, target=0.02, c=0.0).with_(executor=ExecutorCosts(jitter=pairs))
    assert Profile.from_dict(p.to_dict()).executor == p.executor
    res = simulate(p, SpecConfig(mode="ssd", k=3, fanout=(1, 1, 1, 1), backup="neural"),
                   Workload(num_sequences=1, output_tokens=400, prompt_tokens=16), seed=0, protocol="push")
    assert res.sim_time_s / res.rounds == pytest.approx(period, rel=0.03)   # 0.8 / 1.2 drawn at random
