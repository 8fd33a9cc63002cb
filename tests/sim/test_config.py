"""SpecConfig and Workload: validation names the field; TOML/JSON round trips."""

import json

import pytest

from calibration.errors import ConfigError
from saguaro_sim import SpecConfig, Workload


@pytest.mark.parametrize("kwargs, field", [
    ({"k": -1}, "k"), ({"k": 0}, "k"), ({"k": 2.5}, "k"), ({"k": 100}, "k"),
    ({"mode": "beam"}, "mode"), ({"k": 2, "fanout": (1, 2)}, "fanout"), ({"k": 1, "fanout": (1, -2)}, "fanout[1]"),
    ({"k": 1, "fanout": (4, 4), "budget": 4}, "fanout"), ({"sampler_c": 1.5}, "sampler_c"),
    ({"sampler_c": -0.1}, "sampler_c"), ({"backup": "magic"}, "backup"), ({"temperature": -1}, "temperature"),
    ({"batch_size": 0}, "batch_size"), ({"draft_devices": 0}, "draft_devices"), ({"budget": 0}, "budget"),
    ({"fanout_shape": "spiral"}, "fanout_shape"), ({"k": True}, "k"),
])
def test_bad_spec_names_field(kwargs, field):
    with pytest.raises(ConfigError) as e:
        SpecConfig(**kwargs)
    assert e.value.field == field
    assert "allowed" in str(e.value)


def test_defaults():
    assert SpecConfig(k=3).budget == 16
    assert SpecConfig(k=2, fanout=(3, 2, 1)).budget == 6
    assert not hasattr(SpecConfig, "resolve_fanout")      # one resolver: saguaro_sim.resolve


def test_fanout_miss_is_checked_against_the_budget():
    with pytest.raises(ConfigError, match="^fanout_miss: sums to 9, more than budget 6"):
        SpecConfig(k=2, fanout=(3, 2, 1), fanout_miss=(3, 3, 3))


def test_round_trip(tmp_path):
    s = SpecConfig(mode="ssd", k=3, fanout=(4, 3, 2, 5), fanout_miss=(1, 1, 1, 1), sampler_c=0.5,
                   backup="fast", temperature=0.7, batch_size=4, draft_devices=2)
    for name in ("c.toml", "c.json"):
        s.save(tmp_path / name)
        assert SpecConfig.load(tmp_path / name) == s
    (tmp_path / "w.toml").write_text("[spec]\nmode = 'sd'\nk = 5\n")
    assert SpecConfig.load(tmp_path / "w.toml") == SpecConfig(mode="sd", k=5)


def test_bad_files(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("mode = 'ssd'\nk = = 3\n")
    with pytest.raises(ConfigError, match="syntax error"):
        SpecConfig.load(p)
    p.write_text("mode = 'ssd'\nlookahead = 3\n")
    with pytest.raises(ConfigError) as e:
        SpecConfig.load(p)
    assert "lookahead" in e.value.field and "unknown key" in str(e.value)
    j = tmp_path / "bad.json"
    j.write_text(json.dumps({"k": "four"}))
    with pytest.raises(ConfigError) as e:
        SpecConfig.load(j)
    assert e.value.field.endswith(": k") and "bad.json" in e.value.field
    with pytest.raises(ConfigError, match="not found"):
        SpecConfig.load(tmp_path / "missing.toml")


def test_workload_validation():
    assert Workload(num_sequences=2, output_tokens=10).prompt_tokens == 128
    with pytest.raises(ConfigError, match="output_tokens"):
        Workload(output_tokens=0)
