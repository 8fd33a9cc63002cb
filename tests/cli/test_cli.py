"""The saguaro CLI end to end: subprocess runs of presets / simulate / optimize, --json, --out, bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import inproc

from calibration import Profile, list_presets
from saguaro import cli
from saguaro_sim import SpecConfig

ROOT = Path(__file__).resolve().parents[2]
PRESET = "h100-llama70b-tp4-llama1b"
SMALL = ["--num-sequences", "4", "--output-tokens", "96"]


def saguaro(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "saguaro", *args], capture_output=True, text=True, cwd=cwd or ROOT,
                       env=env, timeout=120)
    return p.returncode, p.stdout, p.stderr




def test_presets_subprocess():
    code, out, err = saguaro("presets")
    assert code == 0, err
    for name in list_presets() + ["h100", "b200", "mi300x", "llama-3.1-70b", "qwen3-0.6b"]:
        assert name in out
    code, out, _ = saguaro("presets", "--json")
    data = json.loads(out)
    assert {p["name"] for p in data["profiles"]} == set(list_presets())
    assert data["hardware"]["h100"]["mem_bw"] == 3.35e12 and data["models"]["llama-3.2-1b"]["layers"] == 16


def test_presets_show_one(capsys):
    code, out, _ = inproc(capsys, "presets", PRESET, "--json")
    assert code == 0 and Profile.from_dict(json.loads(out)).name == PRESET
    code, out, _ = inproc(capsys, "presets", PRESET)
    assert code == 0 and "target ms" in out and "T=0.7" in out


def test_simulate_json_and_out(tmp_path):
    out_dir = tmp_path / "sim"
    code, out, err = saguaro("simulate", "--profile", PRESET, "--mode", "ssd", "--k", "5", "--fanout", "6,5,4,3,2,4",
                             "--json", "--out", str(out_dir), *SMALL)
    assert code == 0, err
    doc = json.loads(out)  # stdout is JSON only
    assert doc["spec"]["fanout"] == [6, 5, 4, 3, 2, 4] and doc["spec"]["budget"] == 24
    res = doc["result"]
    assert res["mode"] == "ssd" and 0 < res["hit_rate"] <= 1 and res["tokens_per_round"] > 1
    assert set(doc["baselines"]) == {"ar", "sd"} and doc["speedup_vs_ar"] > 1.5
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        [".saguaro-out", "result.json", "spec.toml", "profile.json", "trace.json", "timeline.png", "timeline.json"])
    assert SpecConfig.load(out_dir / "spec.toml").to_dict() == doc["spec"]
    trace = json.loads((out_dir / "trace.json").read_text())
    assert any(e.get("name") == "verify" for e in trace["traceEvents"])
    assert json.loads((out_dir / "result.json").read_text()) == doc
    assert [p.name for p in tmp_path.iterdir()] == ["sim"]  # no staging folders left


def test_simulate_config_file_and_override(tmp_path, capsys):
    cfg = tmp_path / "spec.toml"
    cfg.write_text('[spec]\nmode = "ssd"\nk = 3\nbudget = 16\nbackup = "fast"\n')
    code, out, err = inproc(capsys, "simulate", "--config", str(cfg), "--batch-size", "2", "--json", *SMALL)
    assert code == 0, err
    spec = json.loads(out)["spec"]
    assert (spec["k"], spec["budget"], spec["backup"], spec["batch_size"]) == (3, 16, "fast", 2)
    code, out, _ = inproc(capsys, "simulate", "--config", str(cfg), "--no-baselines", *SMALL)
    assert code == 0 and "tokens_per_s_per_seq" in out and "speedup" not in out


def test_optimize_json_and_out(tmp_path, capsys):
    out_dir = tmp_path / "opt"
    code, out, err = saguaro("optimize", "--profile", PRESET, "--k-range", "2,6", "--max-budget", "64",
                             "--json", "--out", str(out_dir), *SMALL)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["best"]["mode"] == "ssd" and 2 <= plan["best"]["k"] <= 6 and plan["best"]["budget"] <= 64
    assert plan["table"][0]["rank"] == 1 and plan["pareto"]
    names = {p.name for p in out_dir.iterdir()}
    for stem in ("pareto", "speedup_vs_k", "speedup_vs_batch", "fanout", "hit_vs_fanout", "timeline"):
        assert {f"{stem}.png", f"{stem}.json"} <= names
    assert {"plan.json", "best.toml", "trace.json", "profile.json"} <= names
    k_curve = json.loads((out_dir / "speedup_vs_k.json").read_text())
    assert k_curve["x"] == [2, 3, 4, 5, 6]
    code, out, _ = inproc(capsys, "optimize", "--profile", PRESET, "--k-range", "2,4", "--max-budget", "32", *SMALL)
    assert code == 0 and "Pareto frontier" in out and "best:" in out


BAD = [
    (["simulate", "--k", "0"], "--k"),
    (["simulate", "--k", "abc"], "--k"),
    (["simulate", "--profile", "nope"], "--profile"),
    (["simulate", "--fanout", "1,2"], "--fanout"),
    (["simulate", "--fanout", "4,x"], "--fanout"),
    (["simulate", "--sampler-c", "1.5"], "--sampler-c"),
    (["simulate", "--mode", "fast"], "--mode"),
    (["simulate", "--backup", "magic"], "--backup"),
    (["simulate", "--num-sequences", "0"], "--num-sequences"),
    (["simulate", "--frobnicate"], "--frobnicate"),
    (["optimize", "--objective", "speed"], "--objective"),
    (["optimize", "--k-range", "5,2"], "--k-range"),
    (["optimize", "--modes", "ar,xx"], "--modes"),
    (["optimize", "--batch-size", "0"], "--batch-size"),
    (["presets", "nope"], "name"),
]


@pytest.mark.parametrize("args,field", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, field):
    out_dir = tmp_path / "out"
    extra = ["--out", str(out_dir)] if args[0] != "presets" else []
    code, out, err = inproc(capsys, *args, *extra)
    assert code == 2
    assert field in err and len(err.strip().splitlines()) == 1, err
    assert not out_dir.exists() and list(tmp_path.iterdir()) == []


def test_bad_profile_files(tmp_path, capsys):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    future = tmp_path / "future.json"
    future.write_text(json.dumps({**json.loads((ROOT / "calibration/profiles" / f"{PRESET}.json").read_text()),
                                  "schema_version": 99}))
    bad_cfg = tmp_path / "bad.toml"
    bad_cfg.write_text("k = -1\n")
    for args, needle in ((["--profile", str(corrupt)], "corrupt"), (["--profile", str(future)], "schema_version"),
                         (["--config", str(bad_cfg)], "k")):
        code, out, err = inproc(capsys, "simulate", *args, "--out", str(tmp_path / "o"))
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "o").exists()


def test_bad_input_subprocess_and_existing_out_kept(tmp_path, capsys):
    out_dir = tmp_path / "a" / "b" / "run"  # parents do not exist yet
    code, out, err = saguaro("simulate", "--k", "-3", "--out", str(out_dir))
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "--k" in err
    assert list(tmp_path.iterdir()) == []  # not even the parents
    code, _, err = saguaro("simulate", "--mode", "sd", "--out", str(out_dir), *SMALL)
    assert code == 0, err
    first = json.loads((out_dir / "result.json").read_text())
    code, _, err = inproc(capsys, "simulate", "--mode", "sd", "--k", "-1", "--out", str(out_dir))
    assert code == 2 and json.loads((out_dir / "result.json").read_text()) == first  # failed run: old kept
    code, _, err = inproc(capsys, "simulate", "--mode", "ar", "--out", str(out_dir), *SMALL)
    assert code == 0 and json.loads((out_dir / "result.json").read_text())["spec"]["mode"] == "ar"  # replaced
    assert [p.name for p in (tmp_path / "a" / "b").iterdir()] == ["run"]  # no staging folders left


def test_out_refuses_foreign_folder(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    code, _, err = inproc(capsys, "simulate", "--out", str(mine), *SMALL)
    assert code == 2 and "--out" in err and (mine / "notes.txt").read_text() == "precious"
    (tmp_path / "file").write_text("x")
    code, _, err = inproc(capsys, "simulate", "--out", str(tmp_path / "file"), *SMALL)
    assert code == 2 and "--out" in err


def test_placeholders_and_version(capsys):
    add_parser, main = cli._load("no_such_command")
    assert main(None) == 1 and "not available" in capsys.readouterr().err
    code, out, _ = inproc(capsys, "--version")
    assert code == 0 and out.startswith("saguaro ")
    assert inproc(capsys)[0] == 2  # no subcommand: help on stderr, status 2
