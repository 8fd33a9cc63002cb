"""bench/bench_exec.py on the tiny pair (a few tokens, three repeats): tok/s is the median over the repeats, the
speed-ups and the issue's targets are ratios of medians, and the best repeat is kept beside them."""

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench_exec():
    spec = importlib.util.spec_from_file_location("bench_exec", ROOT / "bench" / "bench_exec.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_headline_and_targets_are_medians(tmp_path, capsys):
    out = tmp_path / "exec.json"
    assert _bench_exec().main(["--batches", "1", "--temps", "0", "--repeats", "3", "--modes", "ar,sd,ssd",
                               "--max-new", "12", "--prompts", "2", "--no-warmup", "--out", str(out)]) == 0
    rows = {r["mode"]: r for r in json.loads(out.read_text())["rows"]}
    for r in rows.values():
        assert r["tokens_per_s"] == pytest.approx(statistics.median(r["tokens_per_s_all"]))
        assert r["tokens_per_s_best"] == max(r["tokens_per_s_all"])
    assert rows["ssd"]["vs_sd"] == pytest.approx(rows["ssd"]["tokens_per_s"] / rows["sd"]["tokens_per_s"])
    assert rows["ssd"]["vs_sd_best"] == pytest.approx(rows["ssd"]["tokens_per_s_best"] / rows["sd"]["tokens_per_s_best"])
    pairs = [a / b for a, b in zip(rows["ssd"]["tokens_per_s_all"], rows["sd"]["tokens_per_s_all"])]
    assert rows["ssd"]["vs_sd_paired"] == pytest.approx(statistics.median(pairs))
    targets = json.loads(out.read_text())["targets"]
    assert targets["ssd_vs_sd"] == pytest.approx(rows["ssd"]["vs_sd"])
    assert targets["ssd_vs_sd_paired"] == pytest.approx(rows["ssd"]["vs_sd_paired"])
    # the bound free drafting allows (SSD's own tokens over its verify time) against the best SD, and SSD's
    # verification beside its draft against SD's at the same K (both at the default K here)
    assert targets["ssd_ceiling_vs_sd"] == pytest.approx(rows["ssd"]["ceiling_tokens_per_s"] / rows["sd"]["tokens_per_s"])
    assert rows["ssd"]["k"] == rows["sd"]["k"]
    assert rows["ssd"]["verify_vs_sd_same_k"] == pytest.approx(rows["ssd"]["phase_ms"]["verify"]
                                                              / rows["sd"]["phase_ms"]["verify"])
    assert targets["ssd_verify_vs_sd_same_k"] == rows["ssd"]["verify_vs_sd_same_k"]
    assert rows["sd"]["verify_vs_sd_same_k"] is None
    printed = capsys.readouterr().out
    assert "targets (batch 1, T=0, medians;" in printed
    head, *lines = printed[printed.index("batch    T"):].splitlines()[:4]
    assert all(len(line.split()) == len(head.split()) for line in lines)   # a title over every column


def test_without_ar_the_speed_ups_over_ar_are_left_out(tmp_path):
    out = tmp_path / "exec.json"
    assert _bench_exec().main(["--batches", "1", "--temps", "0", "--repeats", "1", "--modes", "sd,ssd",
                               "--max-new", "8", "--prompts", "1", "--no-warmup", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert all(r["vs_ar"] is None for r in data["rows"]) and data["targets"]["ssd_vs_ar"] is None


def test_the_miss_schedule_given_is_the_one_that_runs(tmp_path):
    # quiet_suite hands the optimizer's exact choice over: until 2026-12-05 its miss schedule was dropped and
    # the run used the primary fan-out after a miss
    out = tmp_path / "exec.json"
    assert _bench_exec().main(["--batches", "1", "--temps", "0", "--repeats", "1", "--modes", "sd,ssd", "--k", "3",
                               "--fanout", "3,2,2,1", "--fanout-miss", "1,2,3,1", "--max-new", "8", "--prompts", "1",
                               "--no-warmup", "--out", str(out)]) == 0
    row = next(r for r in json.loads(out.read_text())["rows"] if r["mode"] == "ssd")
    assert row["resolved"]["fanout"] == [3, 2, 2, 1] and row["resolved"]["fanout_miss"] == [1, 2, 3, 1]
