"""bench/bench_load.py: its helpers (load levels, errors, the SD-vs-SSD crossover) and a tiny real run that
writes the JSON and the PNG with every (mode, load) row predicted and measured."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.load_compare import compare_row, crossover, crossover_qps, load_levels  # noqa: E402
from calibration.errors import ConfigError  # noqa: E402


def test_levels_bracket_every_mode_capacity():
    lv = load_levels({"ar": 10.0, "sd": 20.0, "ssd": 40.0})
    assert lv == {"light": 3.0, "knee": 20.0, "overloaded": 60.0}
    with pytest.raises(ConfigError):
        load_levels({"ar": 0.0})


def _row(mode, level, qps, pred, meas):
    m = {"tpot_p50_s": meas, "tpot_p99_s": meas, "throughput": 1.0}
    p = {"tpot_p50_s": pred, "tpot_p99_s": pred, "throughput": 1.0}
    return compare_row(mode, level, qps, p, m, {})


def test_compare_row_errors_and_targets():
    r = _row("sd", "light", 1.0, 1.1, 1.0)
    assert r["tpot_p50_s"]["rel_error"] == pytest.approx(0.1) and r["tpot_p99_s"]["within_target"]
    assert compare_row("sd", "x", 1.0, {"tpot_p50_s": None}, {"tpot_p50_s": 1.0}, {})["tpot_p50_s"]["rel_error"] is None


def test_crossover_interpolates_in_log_ratio_and_checks_sides():
    # SSD / SD p99 TPOT: 0.5 at 1 req/s, 2.0 at 3 req/s -> crosses 1 half way (log scale): 2 req/s
    rows = [_row("sd", "light", 1.0, 2.0, 2.0), _row("ssd", "light", 1.0, 1.0, 1.0),
            _row("sd", "knee", 3.0, 1.0, 1.0), _row("ssd", "knee", 3.0, 2.0, 0.9)]
    c = crossover(rows)
    assert c["predicted_qps"] == pytest.approx(2.0)
    assert c["measured_qps"] is None                          # measured: SSD wins at both levels
    assert [p["winner"] for p in c["predicted"]] == ["ssd", "sd"] and not c["same_side"]
    assert crossover_qps([{"qps": 1.0, "ratio": 0.5}, {"qps": 2.0, "ratio": 0.8}]) is None


def test_bench_load_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_load", ROOT / "bench" / "bench_load.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "load.json"
    assert mod.main(["--modes", "sd,ssd", "--requests", "3", "--tokens", "4", "--repeats", "1", "--batch", "2",
                     "--no-progress", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 0
    assert {(r["mode"], r["level"]) for r in data["rows"]} == {(m, lv) for m in ("sd", "ssd")
                                                               for lv in ("light", "knee", "overloaded")}
    lv = data["levels_qps"]
    assert lv["light"] < lv["knee"] < lv["overloaded"]
    assert data["acceptance"] == "workload" and set(data["workload_acceptance"]) == {"sd", "ssd"}
    for r in data["rows"]:
        assert r["repeats"][0]["full_outputs"]
        for m in ("tpot_p50_s", "tpot_p99_s", "throughput"):   # a 4-token request may finish in its first round
            assert r[m]["predicted"] >= 0 and r[m]["measured"] >= 0 and math.isfinite(r[m]["rel_error"])
        assert r["throughput"]["predicted"] > 0 and r["throughput"]["measured"] > 0
        pred, meas = r["phases"]["predicted"], r["phases"]["measured"]
        if r["mode"] == "ssd":   # the executor's SSD forwards both rows every round; the simulator charges both
            assert set(pred["rounds_by_width"]) == set(meas["rounds_by_width"]) == {"2"}
        assert sum(meas["rounds_by_width"].values()) == meas["rounds"] > 0
    assert data["crossover"]["pair"] == "sd vs ssd" and len(data["crossover"]["measured"]) == 3
    assert data["load_average_start"] and "steal_share" in data
    assert all(Path(p).is_file() for p in data["traces"].values())
