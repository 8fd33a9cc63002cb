"""Profile and its building blocks: behaviour of the models, validation, versioned atomic JSON."""

import json

import numpy as np
import pytest

from calibration import (
    AcceptanceModel,
    ConfigError,
    HitCurve,
    LatencyModel,
    Measurements,
    Profile,
    load_preset,
)


def toy() -> Profile:
    return Profile(name="toy", target=LatencyModel.constant(0.020), draft=LatencyModel.linear(0.001, 1e-5),
                   link_s=0.0002, acceptance=AcceptanceModel.geometric(0.8), hits=HitCurve.power_law(0.3, 0.5))


def test_latency_forms():
    assert LatencyModel.constant(0.02)(8, 5, 1000) == 0.02
    lin = LatencyModel.linear(0.001, per_token=1e-4, per_context=1e-7)
    assert lin(2, 3, 100) == pytest.approx(0.001 + 6e-4 + 2e-5)
    pw = LatencyModel.piecewise([1, 8, 64], [0.01, 0.012, 0.05])
    assert pw(1, 4) == pytest.approx(0.01 + 3 * 0.002 / 7)
    assert pw(1, 128) > pw(1, 64)  # linear extrapolation past the last knot
    with pytest.raises(ConfigError, match="knots_x"):
        LatencyModel.piecewise([8, 1], [0.1, 0.2])
    with pytest.raises(ConfigError, match="per_token"):
        LatencyModel.linear(0.001, per_token=-1)


def test_acceptance():
    a = AcceptanceModel.geometric(0.8)
    assert a.expected_tokens(4) == pytest.approx((1 - 0.8 ** 5) / 0.2)
    pmf = a.length_pmf(3)
    assert pmf.sum() == pytest.approx(1) and pmf[3] == pytest.approx(0.8 ** 3)
    h = AcceptanceModel.from_histogram([10, 20, 30, 40])  # lengths 0..3
    assert h.length_pmf(3) == pytest.approx(np.array([0.1, 0.2, 0.3, 0.4]))
    t = AcceptanceModel({0.0: [0.9], 1.0: [0.5]}, c_effect={0.5: 0.9})
    assert t.rates(2, temperature=0.5)[0] == pytest.approx(0.7)
    assert t.rates(1, sampler_c=0.5)[0] == pytest.approx(0.81)
    with pytest.raises(ConfigError, match=r"acceptance.by_temperature\[0.0\]\[0\]"):
        AcceptanceModel({0.0: [1.2]})


def test_hits():
    h = HitCurve.power_law(0.3, 0.5, c_backup=0.6)
    assert h.miss(4) == pytest.approx(0.15) and h.miss(0) == 1.0
    assert h.miss(4, backup=True) == pytest.approx(0.3)
    assert h.miss(1, backup=True) == 0.6
    table = HitCurve({0.0: {"primary": {"c": 0.5, "r": 0.5, "table": [[0, 0.5, 0.7, 0.8]]}}})
    assert table.hit(2) == pytest.approx(0.7) and table.hit(16) == pytest.approx(1 - 0.5 / 4)
    with pytest.raises(ConfigError, match="must not decrease"):
        HitCurve({0.0: {"primary": {"c": 0.5, "r": 0.5, "table": [[0, 0.5, 0.4]]}}})


def test_profile_json_round_trip(tmp_path):
    p = toy()
    p.to_json(tmp_path / "p.json")
    assert Profile.from_json(tmp_path / "p.json") == p
    assert not list(tmp_path.glob(".*tmp"))


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.pop("schema_version"), "schema_version"),
    (lambda d: d.update(schema_version=99), "schema_version"),
    (lambda d: d.update(link_s=-1), "link_s"),
    (lambda d: d["acceptance"]["by_temperature"].update({"0.0": [1.5]}), "acceptance"),
    (lambda d: d["target"].update(kind="quantum"), "target.kind"),
    (lambda d: d.update(colour="red"), "colour"),
])
def test_profile_bad_fields(tmp_path, mutate, needle):
    d = toy().to_dict()
    mutate(d)
    (tmp_path / "p.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError) as e:
        Profile.from_json(tmp_path / "p.json")
    assert needle in str(e.value) and "p.json" in str(e.value)


def test_corrupt_and_unknown(tmp_path):
    (tmp_path / "p.json").write_text('{"name": "x", "target": ')
    with pytest.raises(ConfigError, match="corrupt profile JSON"):
        Profile.from_json(tmp_path / "p.json")
    with pytest.raises(ConfigError, match="unknown preset"):
        load_preset("no-such-preset")


def test_measurements_round_trip(tmp_path):
    m = Measurements(meta={"mode": "ssd"}, rounds=[{"round": 0, "accepted": [2], "hit": [True]}])
    m.to_json(tmp_path / "m.json")
    assert Measurements.from_json(tmp_path / "m.json") == m


def test_old_profile_without_link_bandwidth_or_placement_loads(tmp_path):
    """A profile written before link_bytes_per_s and provenance.placement existed: same schema, defaults."""
    d = toy().to_dict()
    for key in ("link_bytes_per_s", "fast_backup_s", "vocab_size", "provenance"):
        d.pop(key)
    (tmp_path / "old.json").write_text(json.dumps(d))
    p = Profile.from_json(tmp_path / "old.json")
    assert p.link_bytes_per_s == 0.0 and p.message_s(10 ** 9) == p.link_s   # infinite bandwidth
    assert p.placement == {}
    assert all(load_preset(name).link_s >= 0 for name in ("cpu-tinypair", "h100-llama8b-llama1b"))


def test_placement_round_trip_and_validation(tmp_path):
    from calibration.profile import placement_of

    meta = {"device": "cuda:0", "target_devices": ["cuda:0", "cuda:1"], "draft_device": "cuda:2", "tp_size": 2}
    placement = placement_of([{"machine": "x"}, meta])
    assert placement == {"target_devices": ["cuda:0", "cuda:1"], "draft_device": "cuda:2", "tp_size": 2}
    assert placement_of([{"device": "cpu", "draft_device": "cpu"}])["tp_size"] == 1
    p = toy().with_(provenance={"placement": placement}, link_bytes_per_s=2e9)
    p.to_json(tmp_path / "p.json")
    back = Profile.from_json(tmp_path / "p.json")
    assert back.placement == placement and back.message_s(4e6) == pytest.approx(0.0002 + 0.002)
    for bad, needle in (({"tp_size": 3, "target_devices": ["cpu", "cpu"]}, "tp_size"),
                        ({"target_devices": "cuda:0"}, "target_devices"), ({"gpus": 2}, "gpus"),
                        ({"tp_size": 0}, "tp_size")):
        with pytest.raises(ConfigError, match=needle):
            toy().with_(provenance={"placement": bad})


def test_simulated_message_time_is_latency_plus_bytes_over_bandwidth():
    """Every simulated SSD message: link_s + bytes / link_bytes_per_s, bytes as the executor sends them."""
    from saguaro_sim import SpecConfig, Workload, simulate

    link_s, bw, vocab, k, b = 1e-3, 5e6, 1000, 3, 2
    p = toy().with_(link_s=link_s, link_bytes_per_s=bw, vocab_size=vocab)
    for temperature in (0.0, 1.0):
        spec = SpecConfig(mode="ssd", k=k, budget=8, batch_size=b, temperature=temperature)
        res = simulate(p, spec, Workload(num_sequences=b, output_tokens=16), seed=0, trace=True, protocol="reply")
        header = (b + 1) * max(3 + k, 10) * 8                             # float64 [B + 1, W]
        q_rows = b * k * vocab * 4 if temperature > 0 else 0               # float32 [B, K, V]
        want = {"outcome": b * 4 * 8, "speculation": header + q_rows}     # int64 [B, 4] back
        link = [e for e in res.events if e["track"] == "link" and e["args"]["bytes"] == want[e["name"]]]
        assert {e["name"] for e in link} == {"outcome", "speculation"}
        for e in link:
            assert e["dur_s"] == pytest.approx(link_s + want[e["name"]] / bw, rel=1e-12)
