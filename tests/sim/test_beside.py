"""Separate devices of one host that slow each other (Profile.beside_slowdown, CPU cores): SSD's verification
and cache build run slower where they overlap, in the simulator and the closed forms alike; 1 changes nothing."""

import pytest

from calibration import ConfigError, HitCurve, Profile
from saguaro_sim import SpecConfig
from saguaro_sim.analytic import predict
from saguaro_sim.resolve import resolve
from saguaro_sim.simulate import simulate
from tests.sim.test_placement import SHORT, W, toy


@pytest.mark.parametrize("protocol", ["reply", "push"])
@pytest.mark.parametrize("batch,backup", [(1, "neural"), (8, "fast")])
def test_beside_simulation_matches_closed_forms_within_2pct(protocol, batch, backup):
    p = toy(0.004, 0.0002, 0.0003).with_(beside_slowdown=1.1)
    spec = SpecConfig(mode="ssd", k=4, budget=20, batch_size=batch, backup=backup)
    sim = simulate(p, spec, W, seed=1, protocol=protocol)
    pred = predict(p, spec, W, protocol=protocol)
    assert sim.tokens_per_s_per_seq == pytest.approx(pred.tokens_per_s_per_seq, rel=0.02)


def test_overlap_slows_the_round_by_the_shorter_side():
    # every sequence hits: verify 20 ms, build 15 ms, both 1.1x slower while both run: the build ends at
    # 16.5 ms, having let the verification do 15 ms of work, which then ends at 16.5 + 5 = 21.5 ms
    p = toy(draft=0.003).with_(hits=HitCurve.power_law(0.0, 0.5), beside_slowdown=1.1)
    spec = SpecConfig(mode="ssd", k=4, budget=20)
    got = simulate(p, spec, W, seed=0, protocol="reply")
    assert got.sim_time_s / got.rounds == pytest.approx(0.0215, rel=1e-9)
    plain = simulate(p.with_(beside_slowdown=1.0), spec, W, seed=0, protocol="reply")
    assert plain.sim_time_s / plain.rounds == pytest.approx(0.02, rel=1e-9)


def test_resolved_as_concurrent_on_one_draft_device_only():
    p = toy().with_(beside_slowdown=1.08)
    one = resolve(SpecConfig(mode="ssd", k=4, budget=20), p)
    assert (one.placement, one.sharing, one.slowdown) == ("separate", "concurrent", 1.08)
    two = resolve(SpecConfig(mode="ssd", k=4, budget=20, draft_devices=2), p)
    assert (two.placement, two.sharing, two.slowdown) == ("separate", "none", 1.0)
    sd = simulate(p, SpecConfig(mode="sd", k=4), SHORT, seed=0)       # SD has no overlap: unchanged
    assert sd.tokens_per_s_per_seq == simulate(toy(), SpecConfig(mode="sd", k=4), SHORT, seed=0).tokens_per_s_per_seq


def test_profile_field_checked_and_round_trips():
    with pytest.raises(ConfigError, match="profile.beside_slowdown"):
        toy().with_(beside_slowdown=0.95)
    p = toy().with_(beside_slowdown=1.097)
    assert Profile.from_dict(p.to_dict()).beside_slowdown == 1.097
    assert "beside_slowdown" not in toy().to_dict()
