"""Roofline cost model, hardware / model-shape presets and the shipped preset profiles."""

import importlib.util
from pathlib import Path

import pytest

from calibration import ConfigError, Profile, list_presets, load_preset, roofline
from calibration.hardware import HARDWARE, get_hardware
from calibration.roofline import model_latency, paper_acceptance, paper_hits, roofline_params
from calibration.shapes import SHAPES, get_shape

ROOT = Path(__file__).resolve().parents[2]


def test_param_counts_match_published_sizes():
    published = {"llama-3.1-8b": 8.03e9, "llama-3.1-70b": 70.6e9, "llama-3.2-1b": 1.24e9,
                 "llama-3.2-3b": 3.21e9, "qwen3-0.6b": 0.60e9, "qwen3-8b": 8.19e9, "qwen3-32b": 32.8e9}
    assert set(published) == set(SHAPES)
    for name, n in published.items():
        assert SHAPES[name].params() == pytest.approx(n, rel=0.02), name


def test_decode_is_memory_bound():
    for hw in HARDWARE:
        p = roofline_params(hw, "llama-3.1-70b", tp=4)
        lat = model_latency(hw, "llama-3.1-70b", tp=4)
        floor = p["weight_bytes"] / p["mem_bw"]
        assert floor < lat(1, 1, 0) < 2.5 * floor, hw
        # verifying K+1 = 8 tokens costs about as much as one decode step at batch 1
        assert lat(1, 8, 512) < 1.05 * lat(1, 1, 512)


def test_large_batch_is_compute_bound():
    p = roofline_params("h100", "llama-3.1-8b", tp=1)
    lat = model_latency("h100", "llama-3.1-8b", tp=1)
    tokens = 256 * 32
    compute = tokens * p["flops_per_token"] / (p["peak_flops"] * p["efficiency"])
    memory = p["weight_bytes"] / (p["mem_bw"] * p["efficiency"])
    assert compute > 5 * memory
    assert lat(256, 32, 0) == pytest.approx(compute + p["overhead_s"], rel=0.05)
    # doubling the tokens roughly doubles the time once compute-bound
    assert lat(512, 32, 0) / lat(256, 32, 0) == pytest.approx(2.0, rel=0.05)


def test_tensor_parallel_shrinks_weight_time():
    one, four = model_latency("h100", "llama-3.1-70b", tp=1), model_latency("h100", "llama-3.1-70b", tp=4)
    assert roofline_params("h100", "llama-3.1-70b", tp=4)["weight_bytes"] == pytest.approx(
        roofline_params("h100", "llama-3.1-70b", tp=1)["weight_bytes"] / 4, rel=0.01)
    assert four(1, 1, 0) < one(1, 1, 0) / 2.5
    assert roofline_params("h100", "llama-3.1-70b", tp=1)["comm_base_s"] == 0.0
    assert roofline_params("h100", "llama-3.1-70b", tp=4)["comm_base_s"] > 0.0


@pytest.mark.parametrize("model,tp", [("llama-3.1-70b", 4), ("llama-3.2-1b", 1), ("qwen3-32b", 2)])
def test_monotone_in_batch_tokens_context(model, tp):
    lat = model_latency("h100", model, tp=tp)
    for b, n, ctx in [(1, 1, 0), (4, 5, 1000), (32, 8, 4000), (128, 16, 8000)]:
        base = lat(b, n, ctx)
        assert lat(b + 1, n, ctx) >= base
        assert lat(b, n + 1, ctx) >= base
        assert lat(b, n, ctx + 1000) > base
        assert lat(2 * b, n, ctx) > base


def test_faster_hardware_is_faster():
    t = {hw: model_latency(hw, "llama-3.1-70b", tp=4)(1, 1, 1024) for hw in ("a100", "h100", "h200", "b200")}
    assert t["b200"] < t["h200"] < t["h100"] < t["a100"]


def test_roofline_profile_contract():
    p = roofline(hardware="h100", target="llama-3.1-70b", target_tp=4, draft="llama-3.2-1b",
                 acceptance=paper_acceptance(0.85), hits=paper_hits(0.27, 0.53))
    assert isinstance(p, Profile) and p.target.kind == "roofline" and p.draft.kind == "roofline"
    assert p.draft(1, 1, 512) < p.target(1, 1, 512) / 5
    assert p.acceptance.mean_alpha(4, 0.0) == pytest.approx(0.85)
    assert p.hits.miss(1, 0, 0.0) == pytest.approx(0.27)
    assert p.hits.miss(4, 0, 0.7) > p.hits.miss(4, 0, 0.0)           # hotter: more misses
    assert p.hits.miss(4, 0, 0.0, backup=True) > p.hits.miss(4, 0, 0.0)  # backup: more misses
    assert p.hits.miss(4, 0, 0.0, sampler_c=0.5) == pytest.approx(0.8 * p.hits.miss(4, 0, 0.0))
    assert p.acceptance.mean_alpha(4, 0.0, 0.5) == pytest.approx(0.95 * 0.85)
    pcie = roofline(link="pcie")
    assert pcie.message_s(1e6) > p.message_s(1e6) > 0
    assert Profile.from_dict(p.to_dict()) == p


@pytest.mark.parametrize("kw,field", [({"hardware": "tpu9"}, "hardware"), ({"target": "gpt-5"}, "target"),
                                      ({"draft": "nope"}, "draft"), ({"target_tp": 0}, "target_tp"),
                                      ({"link": "carrier-pigeon"}, "link"), ({"efficiency": 1.5}, "efficiency"),
                                      ({"draft": "qwen3-0.6b"}, "draft")])
def test_bad_input_names_the_field(kw, field):
    with pytest.raises(ConfigError) as e:
        roofline(**kw)
    assert e.value.field == field
    if field in ("hardware", "target"):
        assert "h100" in str(e.value) or "llama-3.1-70b" in str(e.value)  # lists the known names


def test_lookup_aliases_and_errors():
    assert get_hardware("H100-SXM").name == "h100" and get_shape("Llama-70B").name == "llama-3.1-70b"
    with pytest.raises(ConfigError, match="mi300x"):
        get_hardware("v100")


def test_shipped_presets_load_and_match_the_script():
    names = list_presets()
    spec = importlib.util.spec_from_file_location("make_presets", ROOT / "scripts" / "make_presets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in mod.PRESETS:
        assert name in names
        p = load_preset(name)
        assert p.to_dict() == mod.build(name).to_dict(), f"{name}.json is stale: run scripts/make_presets.py"
        assert "not measured" in p.provenance["acceptance"]
        assert p.draft(1, 1, 512) < p.target(1, 1, 512)
    for name in names:  # every shipped profile (also ones other tools wrote) loads
        assert load_preset(name).target(1, 1, 0) > 0


def test_make_presets_script(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("make_presets", ROOT / "scripts" / "make_presets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--out", str(tmp_path), "h100-llama8b-llama1b"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["h100-llama8b-llama1b.json"]
    assert Profile.from_json(tmp_path / "h100-llama8b-llama1b.json").provenance["target_devices"] == 1
    assert mod.main(["--out", str(tmp_path), "h200-whatever"]) == 2
    assert "names: unknown preset" in capsys.readouterr().err
