"""SSD's draft on the target's device (placement "shared"): simulator vs closed forms, the H200 finding that
time-sliced SSD trails SD, the optimizer's device count, and separate placement unchanged."""

import pytest

from calibration import AcceptanceModel, ConfigError, HitCurve, LatencyModel, Profile
from calibration.profile import load_preset
from saguaro_sim import SpecConfig, Workload
from saguaro_sim.analytic import predict
from saguaro_sim.optimize import devices_used, optimize
from saguaro_sim.resolve import resolve
from saguaro_sim.search import Constraints
from saguaro_sim.simulate import simulate

W = Workload(num_sequences=64, output_tokens=512, prompt_tokens=64)
SHORT = Workload(num_sequences=8, output_tokens=128, prompt_tokens=64)


def toy(draft=0.004, link=0.0, gap=0.0):
    """Constant latencies, i.i.d. acceptance: the closed forms' assumptions (with messages and lookup)."""
    return Profile(name="toy", target=LatencyModel.constant(0.02), draft=LatencyModel.constant(draft), link_s=link,
                   acceptance=AcceptanceModel.geometric(0.75), hits=HitCurve.power_law(0.45, 0.5, c_backup=0.6),
                   fast_backup_s=0.0003, verifier_gap_s=gap)


def h200_tiny_eager() -> Profile:
    """The tiny pair as the H200 eager executor ran it (docs/BENCHMARKS.md: AR 300 tokens/s, SD 359 at 3.04
    tokens per K = 4 round, draft process on the same GPU): a target forward 1/300 s, a draft step from SD's
    round time, the tiny pair's measured acceptance and hit curves (cpu-tinypair), a 43 us message."""
    step = (3.04 / 359 - 1 / 300) / 4
    return load_preset("cpu-tinypair").with_(name="h200-tinypair-eager", target=LatencyModel.constant(1 / 300),
                                             draft=LatencyModel.constant(step), executor=None, link_s=4.3e-5)


CASES = [(draft, link, gap, sharing, protocol, batch, backup)
         for draft, link, gap in ((0.001, 0.0, 0.0), (0.004, 0.0002, 0.0003), (0.006, 0.0002, 0.0003))
         for sharing in ("time-sliced", "concurrent") for protocol in ("reply", "push")
         for batch, backup in ((1, "neural"), (8, "fast"))]


@pytest.mark.parametrize("draft,link,gap,sharing,protocol,batch,backup", CASES)
def test_shared_simulation_matches_closed_forms_within_2pct(draft, link, gap, sharing, protocol, batch, backup):
    p = toy(draft, link, gap)
    spec = SpecConfig(mode="ssd", k=4, budget=20, batch_size=batch, backup=backup, placement="shared", sharing=sharing)
    sim = simulate(p, spec, W, seed=1, protocol=protocol)
    pred = predict(p, spec, W, protocol=protocol)
    assert sim.tokens_per_s_per_seq == pytest.approx(pred.tokens_per_s_per_seq, rel=0.02)


def test_time_sliced_round_is_the_sum_of_verify_and_build():
    # every sequence hits (c = 0): the round is V + T_p + messages, against max(V, T_p) on separate devices
    p = toy(draft=0.003).with_(hits=HitCurve.power_law(0.0, 0.5))
    spec = SpecConfig(mode="ssd", k=4, budget=20, fanout_shape="uniform")
    sep, ts = (simulate(p, spec.replace(placement=pl), W, seed=0, protocol="reply") for pl in ("separate", "shared"))
    t_build = 0.003 * 5   # glue + K tree steps, each one constant draft forward
    assert sep.sim_time_s / sep.rounds == pytest.approx(0.02, rel=1e-9)
    assert ts.sim_time_s / ts.rounds == pytest.approx(0.02 + t_build, rel=1e-9)


def test_concurrent_overlap_follows_the_slowdown():
    p = toy(draft=0.003).with_(hits=HitCurve.power_law(0.0, 0.5))
    spec = SpecConfig(mode="ssd", k=4, budget=20, placement="shared", sharing="concurrent")
    sep = simulate(p, spec.replace(placement="separate", sharing=None), W, seed=0)
    one = simulate(p.with_(shared_slowdown=1.0), spec, W, seed=0)    # perfect overlap = separate devices
    two = simulate(p.with_(shared_slowdown=2.0), spec, W, seed=0)    # no overlap gain = time-sliced
    ts = simulate(p, spec.replace(sharing="time-sliced"), W, seed=0)
    assert one.tokens_per_s_per_seq == pytest.approx(sep.tokens_per_s_per_seq, rel=1e-9)
    assert two.tokens_per_s_per_seq == pytest.approx(ts.tokens_per_s_per_seq, rel=1e-9)
    mid = simulate(p, spec, W, seed=0)   # 1.5: build 15 ms, verify 20 ms overlap; verify ends at 20 + 0.5 * 15 ms
    assert mid.sim_time_s / mid.rounds == pytest.approx(0.0275, rel=1e-9)


@pytest.mark.parametrize("profile", [h200_tiny_eager(), load_preset("h200-llama8b-llama1b-eager")],
                         ids=lambda p: p.name)
def test_time_sliced_ssd_trails_sd_on_h200_eager(profile):
    """As measured on the H200 (SSD 209 vs SD 359 tokens/s): one GPU time-sliced makes SSD slower than SD,
    while on a second GPU SSD is ahead."""
    sd = simulate(profile, SpecConfig(mode="sd", k=4), SHORT, seed=0)
    spec = SpecConfig(mode="ssd", k=4, budget=16)
    shared = simulate(profile, spec.replace(placement="shared"), SHORT, seed=0)
    separate = simulate(profile, spec, SHORT, seed=0)
    assert shared.tokens_per_s_per_seq / sd.tokens_per_s_per_seq < 1.0
    assert separate.tokens_per_s_per_seq / sd.tokens_per_s_per_seq > 1.0


def test_separate_placement_keeps_todays_numbers():
    # recorded before placement existed (commit 399ea6b), toy profile: exact to float rounding
    p = toy(draft=0.004, link=0.0002, gap=0.0003)
    spec = SpecConfig(mode="ssd", k=4, budget=20, batch_size=4, backup="neural")
    got = [simulate(p, spec, SHORT, seed=3, protocol=pr).tokens_per_s_per_seq for pr in ("reply", "push")]
    assert got == pytest.approx([RECORDED_REPLY, RECORDED_PUSH], rel=1e-12)
    assert resolve(spec, p).placement == "separate" and resolve(spec, p).sharing == "none"


RECORDED_REPLY = 96.83046543610287
RECORDED_PUSH = 96.74313862579409


def test_shared_ssd_counts_no_extra_device():
    assert devices_used(SpecConfig(mode="ssd", draft_devices=2), 4) == 6
    assert devices_used(SpecConfig(mode="ssd", placement="shared"), 4) == 4
    assert devices_used(SpecConfig(mode="sd"), 4) == 4


def test_optimizer_with_shared_placement_uses_one_gpu_and_tells_the_truth():
    prof = load_preset("h200-llama8b-llama1b-eager")
    plan = optimize(prof, SHORT, constraints=Constraints(k_range=(1, 6), max_budget=64, top_n=4, placement="shared"))
    assert all(r["devices"] == 1 for r in plan.table)
    assert all(r["placement"] == "shared" for r in plan.table)
    assert plan.best.mode == "sd"   # time-sliced SSD cannot beat SD here (the H200 measurement)
    sep = optimize(prof, SHORT, constraints=Constraints(k_range=(1, 6), max_budget=64, top_n=4))
    assert sep.best.mode == "ssd" and max(r["devices"] for r in sep.table) == 2


@pytest.mark.parametrize("kw,field", [
    ({"placement": "gpu0"}, "placement"), ({"placement": "shared", "sharing": "mps"}, "sharing"),
    ({"sharing": "concurrent"}, "sharing"), ({"placement": "shared", "draft_devices": 2}, "draft_devices"),
])
def test_bad_placement_names_the_field(kw, field):
    with pytest.raises(ConfigError) as e:
        SpecConfig(mode="ssd", **kw)
    assert e.value.field == field


def test_constraints_and_profile_check_placement():
    with pytest.raises(ConfigError, match="constraints.max_draft_devices"):
        Constraints(placement="shared", max_draft_devices=2)
    with pytest.raises(ConfigError, match="constraints.sharing"):
        Constraints(sharing="concurrent")
    with pytest.raises(ConfigError, match="profile.shared_slowdown"):
        toy().with_(shared_slowdown=0.9)
    p = toy().with_(shared_slowdown=1.25)
    assert Profile.from_dict(p.to_dict()).shared_slowdown == 1.25
    assert "shared_slowdown" not in toy().to_dict()   # older profiles and the default stay as they were


def test_spec_round_trips_with_placement():
    spec = SpecConfig(mode="ssd", placement="shared", sharing="concurrent")
    assert SpecConfig.from_dict(spec.to_dict()) == spec
    assert SpecConfig(mode="ssd", placement="shared").sharing == "time-sliced"
    assert "sharing" not in SpecConfig().to_toml()
