"""`saguaro plan`: table, --json, --out (plots, exports), bad input exits 2 naming the flag; the exported SSD
TOML runs as it is with `saguaro run --config`."""

import json
import tomllib
from pathlib import Path

import pytest
from cli_helpers import inproc

from saguaro.export import export_texts, sglang_args, vllm_speculative_config
from saguaro_sim import SpecConfig

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--qps", "1,16", "--requests", "150", "--workers", "1"]




@pytest.mark.parametrize("args, flag", [
    (["--qps", "1,x"], "--qps"), (["--qps", "0"], "--qps"), (["--qps", ""], "--qps"),
    (["--slo-tpot-ms", "-1"], "--slo-tpot-ms"), (["--slo-ttft-ms", "0"], "--slo-ttft-ms"),
    (["--slo-percentile", "101"], "--slo-percentile"), (["--gpu-hour-usd", "-2"], "--gpu-hour-usd"),
    (["--trace", "/nonexistent.jsonl"], "--trace"), (["--max-batch", "0"], "--max-batch"),
    (["--requests", "3"], "--requests"), (["--modes", "ar,xd"], "--modes"),
    (["--length-shape", "zipf"], "--length-shape"), (["--length-spread", "-1"], "--length-spread"),
    (["--output-tokens", "0"], "--output-tokens"), (["--workers", "0"], "--workers"),
    (["--profile", "no-such-preset"], "--profile"), (["--slo-tpot-ms", "abc"], "--slo-tpot-ms"),
])
def test_bad_input_exits_2_with_one_line_naming_the_flag(capsys, tmp_path, args, flag):
    out_dir = tmp_path / "out"
    code, out, err = inproc(capsys, "plan", *args, "--out", str(out_dir))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and flag in err and "Traceback" not in err
    assert not out_dir.exists()


def test_bad_trace_line_names_the_file_and_line(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}\n{"arrival_s": -1}\n')
    code, _, err = inproc(capsys, "plan", "--trace", str(trace))
    assert code == 2 and "t.jsonl:2" in err


def test_table_json_and_out(capsys, tmp_path):
    out_dir = tmp_path / "plan"
    code, out, err = inproc(capsys, "plan", *FAST, "--out", str(out_dir))
    assert code == 0, err
    assert "cheapest per load:" in out and "crossovers:" in out and "p99 TPOT ms" in out
    names = {p.name for p in out_dir.iterdir()}
    for stem in ("tpot_vs_load", "gpus_vs_load", "cost_vs_load"):
        assert {f"{stem}.png", f"{stem}.json"} <= names
        fig = json.loads((out_dir / f"{stem}.json").read_text())
        assert fig["x"] == [1.0, 16.0] and set(fig["series"]) == {"ar", "sd", "ssd"} and "requests / s" in fig["x_label"]
    plan = json.loads((out_dir / "plan.json").read_text())
    assert {r["mode"] for r in plan["rows"]} == {"ar", "sd", "ssd"} and len(plan["best"]) == 2
    for b in plan["best"]:
        assert f"recommended-{b['qps']:g}qps.toml" in names
        assert (f"recommended-{b['qps']:g}qps.vllm.txt" in names) == (b["mode"] == "sd")
    code, out, _ = inproc(capsys, "plan", *FAST, "--json", "--modes", "sd,ssd")
    doc = json.loads(out)
    assert code == 0 and doc["qps"] == [1.0, 16.0] and {r["mode"] for r in doc["rows"]} == {"sd", "ssd"}
    assert all(c["pair"] == "ssd vs sd" for c in doc["crossovers"])


def test_exports_follow_the_engines_documented_flags():
    sd = SpecConfig(mode="sd", k=5)
    assert vllm_speculative_config(sd, "m") == {"model": "m", "num_speculative_tokens": 5, "method": "draft_model"}
    args = sglang_args(sd, "m")
    assert args[args.index("--speculative-num-steps") + 1] == "5"
    assert args[args.index("--speculative-num-draft-tokens") + 1] == "6"
    assert set(export_texts(sd)) == {".toml", ".vllm.txt", ".sglang.txt"}
    assert set(export_texts(SpecConfig(mode="ssd", k=4, budget=20))) == {".toml"}
    toml = tomllib.loads(export_texts(SpecConfig(mode="ssd", k=4, budget=20), note="a\nb")[".toml"])
    assert SpecConfig.from_dict(toml["spec"]) == SpecConfig(mode="ssd", k=4, budget=20)


def test_exported_ssd_toml_runs_with_saguaro_run_config(tmp_path, capsys, monkeypatch):
    spec = SpecConfig(mode="ssd", k=3, budget=12, backup="fast", batch_size=2)
    path = tmp_path / "rec.toml"
    path.write_text(export_texts(spec, note="from saguaro plan")[".toml"])
    monkeypatch.chdir(tmp_path)
    code, out, err = inproc(capsys, "run", "--config", str(path), "--max-new-tokens", "6", "--json")  # the SSD
    assert code == 0, err                                            # draft still runs in its own process
    doc = json.loads(out)
    assert doc["spec"] == spec.to_dict() and doc["mode"] == "ssd" and doc["tokens"] > 0
