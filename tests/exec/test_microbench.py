"""Microbenchmarks on real (small, random) models and real processes; `saguaro profile` / `calibrate` files."""

from __future__ import annotations

import json
import multiprocessing

import pytest

torch = pytest.importorskip("torch")

from calibration import ConfigError, Measurements, Profile  # noqa: E402
from calibration.measurements import LATENCY_FIELDS, LINK_FIELDS  # noqa: E402
from saguaro.cli import main as cli  # noqa: E402
from saguaro_exec.measure.microbench import LatencyGrid, default_grid, profile_latency, profile_link  # noqa: E402
from saguaro_exec.model import ModelConfig, random_model, save_model  # noqa: E402


def small(hidden=64, layers=2, positions=512):
    cfg = ModelConfig(vocab_size=256, hidden_size=hidden, num_layers=layers, num_heads=4, num_kv_heads=2,
                      intermediate_size=2 * hidden, max_position_embeddings=positions)
    return random_model(cfg, seed=0)


def test_default_grid_covers_verify_and_tree_widths():
    d = default_grid("draft", ks=(3, 5), budgets=(12, 40), draft_devices=2)
    t = default_grid("target", ks=(3, 5), budgets=(12, 40))
    assert set(d.new_tokens) == {1, 2, 3, 4, 5, 6, 20}  # decode, every width to K+1, ceil(budget / draft devices)
    assert set(t.new_tokens) == {1, 2, 3, 4, 5, 6}
    assert set(default_grid("target", ks=(3, 5), quick=True).new_tokens) == {1, 4, 6}
    assert len(d.points()) == len(d.batches) * len(d.new_tokens) * len(d.contexts)
    with pytest.raises(ConfigError, match="who"):
        default_grid("oracle")
    with pytest.raises(ConfigError, match=r"grid.batches"):
        LatencyGrid(batches=(0,))


def test_profile_latency_rows_and_ordering():
    model = small(hidden=128)
    seen = []
    rows = profile_latency(model, "draft", LatencyGrid((1, 4), (1, 64), (32,)), warmup=1, repeats=5, threads=1,
                           progress=lambda i, n: seen.append((i, n)))
    assert seen[-1] == (20, 20) and len(rows) == 4   # 4 points x 5 interleaved passes
    for r in rows:
        assert set(LATENCY_FIELDS) <= set(r) and r["who"] == "draft" and r["n"] == 5
        assert 0 < r["p10_s"] <= r["median_s"] <= r["p90_s"]
    by = {(r["batch"], r["new_tokens"]): r["median_s"] for r in rows}
    assert by[(4, 64)] > 2 * by[(1, 1)]  # 256 tokens per forward cost clearly more than 1
    with pytest.raises(ConfigError, match=r"grid.contexts"):
        profile_latency(small(positions=64), "target", LatencyGrid((1,), (8,), (100,)))
    with pytest.raises(ConfigError, match="repeats"):
        profile_latency(model, "target", repeats=0)


def test_interleaved_passes_spread_a_drifting_machine_over_every_point():
    """Four points of equal cost on a machine that slows down 3x over the run (a forward hook sleeping longer
    each call): timed in interleaved passes, their medians agree; point by point, the last would read ~2x the
    first and the latency fit would bend at whichever batch size hit the slow window."""
    import time

    from saguaro_exec.measure.microbench import interleaved_passes

    passes = interleaved_passes(4, 5)
    assert all(sorted(p) == [0, 1, 2, 3] for p in passes) and len({tuple(p) for p in passes}) > 1
    model = small(hidden=32, layers=1)
    calls = []

    def drift(_module, _args):
        calls.append(0)
        time.sleep(0.004 * (1 + 2 * min(1.0, len(calls) / 30)))

    hook = model.register_forward_pre_hook(drift)
    try:
        rows = profile_latency(model, "target", LatencyGrid((1, 2), (1, 2), (16,)), warmup=1, repeats=5, threads=1)
    finally:
        hook.remove()
    med = [r["median_s"] for r in rows]
    assert len(calls) >= 26 and max(med) / min(med) < 1.4, med


def test_profile_link_two_processes_clean_exit():
    rows = profile_link(sizes=(64, 1 << 18), warmup=2, repeats=10)
    assert [r["bytes"] for r in rows] == [64, 1 << 18]
    for r in rows:
        assert set(LINK_FIELDS) <= set(r) and r["round_trip_s"] > 0 and r["n"] == 10
    assert multiprocessing.active_children() == []


def test_profile_and_calibrate_commands_write_files(tmp_path, capsys):
    save_model(small(), tmp_path / "target")
    save_model(small(hidden=32, layers=1), tmp_path / "draft")
    out = tmp_path / "m" / "grid.json"
    rc = cli(["profile", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"), "--quick",
              "--no-link", "--repeats", "2", "--contexts", "16,64", "--threads", "1", "-o", str(out), "--no-progress"])
    assert rc == 0 and "wrote" in capsys.readouterr().out
    meas = Measurements.from_json(out)
    assert {r["who"] for r in meas.latency} == {"target", "draft"}
    assert meas.meta["kind"] == "microbench" and meas.meta["vocab_size"] == 256
    assert [p.name for p in out.parent.iterdir()] == ["grid.json"]  # atomic: no temp file left behind
    # a run's rounds (synthetic here) + the grid -> a profile
    run = tmp_path / "run.json"
    rounds = [{"accepted": [i % 4], "from_backup": [False], "bonus_rank": [i % 3], "batch": 1, "context": [20],
               "t0": 0.01 * i, "t1": 0.01 * i + 0.009, "verify_s": 0.004 + 0.001 * (i % 2)} for i in range(200)]
    Measurements(meta={"spec": {"mode": "ssd", "k": 3, "temperature": 0.0}, "top_n": 8}, rounds=rounds).to_json(run)
    prof = tmp_path / "prof.json"
    assert cli(["calibrate", str(out), str(run), "-o", str(prof), "--name", "t"]) == 0
    p = Profile.from_json(prof)
    assert p.name == "t" and p.provenance["samples"]["rounds"] == 200 and p.vocab_size == 256
    assert p.hits.hit(3, 0) == pytest.approx(1.0)  # ranks 0..2 all fall inside a fan-out of 3
    over = p.executor("verify", 1, 4) + p.target(1, 4, 20)      # the run's executor costs are in the profile
    assert "verify" in p.executor.lines["greedy"] and over == pytest.approx(0.0045, rel=0.05)
    assert "executor" in json.loads(prof.read_text())
    assert cli(["profile", "--batches", "0", "-o", str(out)]) == 2
    assert "--batches" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(json.dumps({"schema_version": 99}))
    assert cli(["calibrate", str(tmp_path / "bad.json")]) == 2
