"""Per-request acceptance (acceptance.row_scale): a kept batch lasts as long as its slowest row; profiles
without the key simulate as before."""

import dataclasses

import pytest

from calibration import AcceptanceModel, HitCurve, LatencyModel, Profile
from saguaro_sim import SpecConfig, Workload
from saguaro_sim.analytic import predict
from saguaro_sim.simulate import simulate

OUT = 96


def toy(alpha=0.75, row_scale=None):
    acc = AcceptanceModel({0.0: (alpha,)}, row_scale=row_scale or {})
    return Profile(name="toy", target=LatencyModel.constant(0.02), draft=LatencyModel.constant(0.001), link_s=0.0,
                   vocab_size=32000, acceptance=acc, hits=HitCurve.power_law(0.5, 0.45), fast_backup_s=0.0003)


@pytest.mark.parametrize("mode", ["ssd", "sd"])
def test_kept_batch_lasts_as_long_as_its_slowest_row(mode):
    """Scale 0 accepts nothing (1 token a round), scale 100 clips every rate to 1 (K + 1 tokens a round): a
    kept batch of 8 rows holding both kinds runs exactly OUT rounds, the slow rows' count, and its fast rows
    finish early (more than 1 token per row-round on average), while rows alike finish far sooner."""
    spec = SpecConfig(mode=mode, k=3, budget=12, batch_size=8)
    w = Workload(num_sequences=8, output_tokens=OUT, prompt_tokens=32)
    het = simulate(toy(row_scale={0.0: (0.0, 100.0)}), spec, w, seed=0, batching="kept")
    assert het.rounds == OUT
    assert 1.2 < het.tokens_per_round < 3.0
    homo = simulate(toy(alpha=0.75), spec, w, seed=0, batching="kept")
    assert homo.rounds < 0.6 * OUT


def test_one_scale_is_the_homogeneous_model_with_scaled_rates():
    """A single multiplier m is the homogeneous profile with every rate times m, draw for draw (the per-row
    path uses the same uniforms; its own stream is a child of the seed's), SSD hits included."""
    spec = SpecConfig(mode="ssd", k=4, fanout=(4, 3, 3, 3, 3), batch_size=4)  # fixed: the resolver reads rates
    w = Workload(num_sequences=12, output_tokens=128, prompt_tokens=32)
    a = simulate(toy(alpha=0.8, row_scale={0.0: (0.75,)}), spec, w, seed=3)
    b = simulate(toy(alpha=0.8 * 0.75), spec, w, seed=3)
    assert (a.sim_time_s, a.tokens, a.rounds, a.hit_rate) == (b.sim_time_s, b.tokens, b.rounds, b.hit_rate)


def test_homogeneous_profiles_keep_the_closed_forms_and_the_old_files():
    """No row_scale: written nowhere, read from old dicts, and the simulator still agrees with the closed form."""
    p = toy()
    d = p.acceptance.to_dict()
    assert "row_scale" not in d and AcceptanceModel.from_dict(d).row_scales(0.0) == ()
    het = dataclasses.replace(p.acceptance, row_scale={0.0: (0.5, 1.2), 0.7: (1.0,)})
    assert AcceptanceModel.from_dict(het.to_dict()).row_scales(0.6) == (1.0,)
    spec = SpecConfig(mode="ssd", k=4, budget=20, batch_size=2)
    w = Workload(num_sequences=48, output_tokens=512, prompt_tokens=64)
    assert simulate(p, spec, w, seed=0).tokens_per_s_per_seq == pytest.approx(
        predict(p, spec, w).tokens_per_s_per_seq, rel=0.02)


def test_bad_row_scale_names_the_field():
    with pytest.raises(Exception, match=r"acceptance.row_scale\[0.0\]\[1\]"):
        AcceptanceModel({0.0: (0.8,)}, row_scale={0.0: [1.0, -2]})
