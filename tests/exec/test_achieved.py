"""Achieved bandwidth / FLOP/s: the byte and FLOP accounting by hand, the per-round accounting, real tiny-pair
runs (peak unknown on CPU, fractions with a given hardware), and bad hardware names (config and CLI)."""

from __future__ import annotations

import json

import pytest

from calibration.errors import ConfigError
from calibration.shapes import ModelShape, get_shape
from calibration.traffic import Traffic, achieved_rates, forward_traffic
from saguaro_exec.measure.achieved import achieved, preset_for_device_name, shape_dict

# tiny target config.json: 4 layers, hidden 128, 4 heads, 2 KV heads, head_dim 32, intermediate 352, vocab 272
TINY_PARAMS = 4 * (128 * 32 * (2 * 4 + 2 * 2) + 3 * 128 * 352 + 2 * 128) + 272 * 128 + 128   # 773,248 streamed
TINY_KV_PER_TOKEN = 2 * 4 * 2 * 32 * 4                                                       # fp32: 2,048 B


@pytest.fixture(scope="module")
def tiny_target() -> ModelShape:
    from saguaro_exec.io.assets import tiny_pair_paths
    from saguaro_exec.model import read_config

    return ModelShape(**shape_dict(read_config(tiny_pair_paths()[0]), "tiny-target"))


def test_tiny_target_verify_by_hand(tiny_target):
    """Batch 2 verifying K+1 = 5 tokens after 100 cached tokens, float32 weights and logits."""
    t = forward_traffic(tiny_target, batch=2, new_tokens=5, context=100, dtype_bytes=4)
    assert TINY_PARAMS == 773_248
    assert t.weight_bytes == 4 * 773_248 == 3_092_992
    assert t.kv_read_bytes == 2 * 100 * TINY_KV_PER_TOKEN == 409_600
    assert t.kv_write_bytes == 10 * TINY_KV_PER_TOKEN == 20_480
    assert t.logits_bytes == 10 * 272 * 4 == 10_880
    assert t.bytes == 3_533_952
    attention = 10 * (100 + 5) * 4 * 4 * 4 * 32                 # tokens x keys x 4 x layers x heads x head_dim
    assert t.flops == 10 * 2 * 773_248 + attention == 17_615_360


def test_llama_8b_decode_by_hand():
    """Decode at batch 1 reads the bf16 weights once: 15.0 GB streamed (16.06 GB with the input embedding,
    which decode only gathers a row of), plus 128 KiB of K/V per cached token."""
    m = get_shape("llama-3.1-8b")
    layer = 4096 * 128 * (2 * 32 + 2 * 8) + 3 * 4096 * 14336 + 2 * 4096
    streamed = 32 * layer + 128256 * 4096 + 4096
    t = forward_traffic(m, batch=1, new_tokens=1, context=0)
    assert t.weight_bytes == 2 * streamed == pytest.approx(15.01e9, rel=1e-3)
    assert t.weight_bytes + 2 * 128256 * 4096 == pytest.approx(2 * m.params()) == pytest.approx(16.06e9, rel=1e-3)
    assert t.kv_read_bytes == 0 and t.kv_write_bytes == 2 * 32 * 8 * 128 * 2 == 131_072
    assert t.flops == 2 * streamed + 4 * 32 * 32 * 128
    long = forward_traffic(m, batch=1, new_tokens=1, context=8192)
    assert long.kv_read_bytes == 8192 * 131_072 == pytest.approx(1.07e9, rel=1e-2)
    # at the H200's datasheet 4.8 TB/s, one decode step cannot be faster than ~3.1 ms
    assert achieved_rates(t, t.bytes / 4.8e12, "h200")["bandwidth_fraction"] == pytest.approx(1.0)
    assert t.bytes / 4.8e12 == pytest.approx(3.13e-3, rel=1e-2)


def test_traffic_adds_and_rates():
    a = Traffic(1.0, 2.0, 3.0, 4.0, 5.0)
    s = a + a
    assert s.bytes == 20.0 and s.flops == 10.0
    r = achieved_rates(s, 2.0)
    assert r["bytes_per_s"] == 10.0 and r["flops_per_s"] == 5.0
    assert r["bandwidth_fraction"] is None and r["flops_fraction"] is None
    r = achieved_rates(s, 2.0, "h100")
    assert r["bandwidth_fraction"] == pytest.approx(10.0 / 3350e9) and r["flops_fraction"] == pytest.approx(5 / 989e12)
    r = achieved_rates(s, 2.0, "h100", devices=4)     # a tensor-parallel target: fractions of 4 peaks
    assert r["bandwidth_fraction"] == pytest.approx(10.0 / (4 * 3350e9))
    with pytest.raises(ConfigError) as e:
        forward_traffic("llama-3.1-8b", -1, 1, 0)
    assert e.value.field == "batch"


def _row(verify_s: float, ctx: list[int], **kw) -> dict:
    return {"batch": len(ctx), "context": ctx, "verify_s": verify_s, **kw}


def test_per_round_accounting(tiny_target):
    """AR: one 1-token target forward per round; SD: K+1 verify + K one-token draft steps; SSD: glue of K+1
    then K tree steps of N = sum(fanout) branches; fallback rows follow their own engine."""
    draft = get_shape("llama-3.2-1b")
    meta = {"target_shape": shape_dict_of(tiny_target), "draft_shape": shape_dict_of(draft), "dtype_bytes": 4,
            "fanout": [2, 1, 1], "hardware": None, "draft_hardware": "h200"}
    ar = achieved("ar", 2, [_row(0.5, [10, 20]), _row(0.5, [11])], {**meta, "draft_shape": None})
    want = forward_traffic(tiny_target, 2, 1, 15, 4) + forward_traffic(tiny_target, 1, 1, 11, 4)
    assert ar["draft"] is None and ar["target"]["forwards"] == 2 and ar["target"]["phase"] == "decode"
    assert ar["target"]["bytes"] == pytest.approx(want.bytes) and ar["target"]["bytes_per_s"] == pytest.approx(want.bytes)
    assert ar["target"]["peak"] == "unknown" and ar["target"]["bandwidth_fraction"] is None

    sd = achieved("sd", 2, [_row(0.25, [10], draft_reply_s=0.5)], meta)
    d = forward_traffic(draft, 1, 1, 10, 4) + forward_traffic(draft, 1, 1, 11, 4)
    assert sd["target"]["flops"] == pytest.approx(forward_traffic(tiny_target, 1, 3, 10, 4).flops)
    assert sd["draft"]["bytes_per_s"] == pytest.approx(d.bytes / 0.5) and sd["draft"]["forwards"] == 2
    assert sd["draft"]["bandwidth_fraction"] == pytest.approx(d.bytes / 0.5 / 4.8e12)

    rows = [_row(0.25, [10], glue_s=0.1, tree_s=0.3), _row(0.25, [13], fallback="ar"),
            _row(0.25, [14], fallback="sd", draft_reply_s=0.2)]
    ssd = achieved("ssd", 2, rows, meta)
    glue_tree = forward_traffic(draft, 1, 3, 10, 4) + forward_traffic(draft, 1, 4, 12, 4) + \
        forward_traffic(draft, 1, 4, 16, 4)
    fallback_sd = forward_traffic(draft, 1, 1, 14, 4) + forward_traffic(draft, 1, 1, 15, 4)
    assert ssd["draft"]["phase"] == "glue+tree" and ssd["draft"]["forwards"] == 5
    assert ssd["draft"]["bytes"] == pytest.approx((glue_tree + fallback_sd).bytes)
    assert ssd["draft"]["seconds"] == pytest.approx(0.6)
    tgt = forward_traffic(tiny_target, 1, 3, 10, 4) + forward_traffic(tiny_target, 1, 1, 13, 4) + \
        forward_traffic(tiny_target, 1, 3, 14, 4)
    assert ssd["target"]["bytes"] == pytest.approx(tgt.bytes) and ssd["target"]["seconds"] == pytest.approx(0.75)


def shape_dict_of(m: ModelShape) -> dict:
    return {k: v for k, v in m.to_dict().items() if k != "params"}


@pytest.mark.parametrize("name, preset", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA B200", "b200"), ("AMD Instinct MI300X", "mi300x"), ("NVIDIA A100-PCIE-40GB", None),
    ("NVIDIA H100 PCIe", None), ("NVIDIA GeForce RTX 4090", None)])
def test_device_names(name, preset):
    assert preset_for_device_name(name) == preset


def _run(mode: str, **kw):
    import saguaro_exec
    from saguaro_sim import SpecConfig

    spec = SpecConfig(mode=mode, k=3, batch_size=2)
    return saguaro_exec.run(saguaro_exec.RunConfig(spec=spec, prompts=["The cat", "Once upon a time"],
                                                   max_new_tokens=8, **kw))


@pytest.mark.parametrize("mode", ["ar", "sd"])
def test_tiny_pair_run_cpu_peak_unknown(mode, tmp_path):
    rep = _run(mode)
    t = rep.achieved["target"]
    verify_s = sum(r["verify_s"] for r in rep.measurements.rounds)
    assert t["seconds"] == pytest.approx(verify_s) and t["forwards"] == len(rep.measurements.rounds)
    assert t["bytes_per_s"] > 0 and t["flops_per_s"] > 0
    assert t["bandwidth_fraction"] is None and t["flops_fraction"] is None and t["peak"] == "unknown"
    assert rep.measurements.meta["hardware"] is None and rep.measurements.meta["dtype_bytes"] == 4
    if mode == "sd":
        assert rep.achieved["draft"]["bytes_per_s"] > 0 and rep.achieved["draft"]["flops_per_s"] > 0
    else:
        assert rep.achieved["draft"] is None
    assert any(r[1] == "peak unknown" for r in rep.achieved_rows())
    rep.to_json(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["achieved"] == json.loads(json.dumps(rep.achieved))


def test_tiny_pair_ssd_with_h200_fractions():
    rep = _run("ssd", hardware="H200")
    assert rep.measurements.meta["hardware"] == rep.measurements.meta["draft_hardware"] == "h200"
    for side in ("target", "draft"):
        a = rep.achieved[side]
        assert a["peak"] == "h200" and a["bytes_per_s"] > 0 and a["flops_per_s"] > 0
        assert a["bandwidth_fraction"] == pytest.approx(a["bytes_per_s"] / 4.8e12)
        assert a["flops_fraction"] == pytest.approx(a["flops_per_s"] / 989e12)
        assert 0 < a["bandwidth_fraction"] < 1e-2 and 0 < a["flops_fraction"] < 1e-2   # a tiny model on a CPU
    assert rep.achieved["draft"]["phase"] == "glue+tree" and rep.achieved["draft"]["seconds"] > 0
    assert rep.summary()["achieved"] is rep.achieved


def test_bad_hardware_is_config_error(tmp_path):
    from saguaro_exec import RunConfig

    for bad in ("tpu-v5", 3):
        with pytest.raises(ConfigError) as e:
            RunConfig(hardware=bad)
        assert e.value.field == "hardware" and "h200" in e.value.allowed
    cfg = tmp_path / "run.toml"
    cfg.write_text('hardware = "gtx1080"\n[spec]\nmode = "ar"\n')
    with pytest.raises(ConfigError) as e:
        RunConfig.from_toml(cfg)
    assert e.value.field.endswith("hardware") and str(cfg) in e.value.field


def test_cli_hardware_flag(tmp_path, capsys):
    from saguaro import cli

    out = tmp_path / "out"
    assert cli.main(["run", "--mode", "ar", "--hardware", "tpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--hardware" in err and "h200" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
    assert cli.main(["run", "--mode", "ar", "--max-new-tokens", "4", "--prompt", "Hi", "--hardware", "h100",
                     "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["achieved"]["target"]["peak"] == "h100" and doc["achieved"]["target"]["bandwidth_fraction"] > 0
    assert cli.main(["run", "--mode", "ar", "--max-new-tokens", "4", "--prompt", "Hi"]) == 0
    table = capsys.readouterr().out
    assert "target decode GB/s" in table and "peak unknown" in table
    assert table.index("tokens_per_s") < table.index("target decode GB/s") < table.index("mean_tokens_per_round")
