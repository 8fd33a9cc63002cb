"""bench/bench_load.py: its helpers (load levels, errors, the noise floor and errors beyond it, target counts,
the drift-adjusted prediction, the SD-vs-SSD crossover) and a tiny real run that writes the JSON and the PNG with
every (mode, load) row predicted and measured."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.load_compare import (  # noqa: E402
    beyond_repeats,
    compare_row,
    crossover,
    crossover_qps,
    load_levels,
    noise_floors,
    summarize,
    target_counts,
)
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


def test_measured_winners_carry_a_paired_sign_test_over_the_repeats():
    """SSD lower in 7 of 7 paired repeats is a winner (two-sided p = 2 / 128); 4 of 7 is not, though its median
    names one: the crossover counts agreement apart where the measurement supports a winner."""
    def reps(vals):
        return [{"tpot_p99_s": v} for v in vals]

    sd_o, ssd_o = [2.6, 2.9, 3.2, 3.2, 3.3, 2.4, 2.8], [1.9, 2.0, 2.2, 2.6, 2.3, 2.2, 2.4]
    sd_k, ssd_k = [2.0, 2.8, 2.2, 2.3, 3.0, 2.3, 2.3], [2.6, 2.1, 2.0, 2.6, 2.4, 2.5, 2.5]
    rows = [_row("sd", "knee", 1.0, 1.0, 2.3), _row("ssd", "knee", 1.0, 1.1, 2.5),
            _row("sd", "overloaded", 2.0, 1.0, 2.9), _row("ssd", "overloaded", 2.0, 1.1, 2.2)]
    for r, v in zip(rows, (sd_k, ssd_k, sd_o, ssd_o)):
        r["repeats"] = reps(v)
    c = crossover(rows)
    knee, over = c["measured"]
    assert over["paired"] == {"b_lower": 7, "n": 7, "p": pytest.approx(2 / 128), "significant": True}
    assert knee["paired"]["b_lower"] == 3 and not knee["paired"]["significant"]
    assert c["levels_agreeing"] == "1/2" and c["significant_levels_agreeing"] == "0/1"
    assert "paired" not in c["predicted"][0]


def test_beyond_noise_is_the_distance_to_the_repeats_range():
    reps = [0.9, 1.0, 1.2]                                   # median 1.0
    assert beyond_repeats(1.1, reps, 1.0) == 0.0             # inside the range
    assert beyond_repeats(1.5, reps, 1.0) == pytest.approx(0.3)
    assert beyond_repeats(0.7, reps, 1.0) == pytest.approx(0.2)
    assert beyond_repeats(0.7, [0.9, None], 1.0) is None and beyond_repeats(None, reps, 1.0) is None


def _cell(p50, p99, tput):
    return {"tpot_p50_s": p50, "tpot_p99_s": p99, "throughput": tput}


def test_rows_count_targets_plainly_and_beyond_noise():
    # repeats of p50 TPOT 10 / 12 / 14 ms (spread 4/12 = 33%); the prediction 8 ms is 33% fast, 2 ms (17%) below
    # the fastest repeat; with the machine 1.25x slower than at calibration the adjusted 10 ms is inside the range
    reps = [_cell(0.010, 0.020, 100.0), _cell(0.012, 0.021, 104.0), _cell(0.014, 0.022, 108.0)]
    med, spread = summarize(reps)
    assert med == _cell(0.012, 0.021, 104.0) and spread["tpot_p50_s"] == pytest.approx(1 / 3)
    row = compare_row("sd", "knee", 2.0, _cell(0.008, 0.0215, 120.0), med, spread, reps,
                      adjusted=_cell(0.010, 0.0225, 96.0), drift=1.25)
    p50, p99, tp = row["tpot_p50_s"], row["tpot_p99_s"], row["throughput"]
    assert p50["rel_error"] == pytest.approx(-1 / 3) and not p50["within_target"]
    assert p50["beyond_noise"] == pytest.approx(0.002 / 0.012) and not p50["within_target_beyond_noise"]
    assert p50["range"] == [0.010, 0.014] and p50["drift_adjusted"]["beyond_noise"] == 0.0
    assert p99["beyond_noise"] == 0.0 and p99["within_target"] and p99["drift_adjusted"]["within_target"]
    assert tp["beyond_noise"] == pytest.approx(12 / 104) and tp["within_target_beyond_noise"] is False
    assert tp["drift_adjusted"]["rel_error"] == pytest.approx(-8 / 104)
    t = target_counts([row])
    assert (t["plain"]["met"], t["plain_beyond_noise"]["met"]) == (1, 1)           # p99 only
    assert (t["drift_adjusted"]["met"], t["drift_adjusted_beyond_noise"]["met"]) == (2, 3)
    assert t["plain"]["of"] == 3 and t["plain"]["by_metric"]["tpot_p99_s"] == {"met": 1, "of": 1}
    assert "drift_adjusted" not in target_counts([compare_row("sd", "x", 1.0, med, med, spread, reps)])
    by_rounds = compare_row("sd", "knee", 2.0, _cell(0.008, 0.0215, 120.0), med, spread, reps,
                            round_adjusted=_cell(0.0115, 0.021, 105.0), round_speed=1.4)
    assert by_rounds["round_speed"] == 1.4 and by_rounds["tpot_p50_s"]["round_adjusted"]["within_target"]
    assert target_counts([by_rounds])["round_adjusted"]["met"] == 3 and "drift_adjusted" not in target_counts([by_rounds])
    assert noise_floors([row])["throughput"]["max_spread"] == pytest.approx(8 / 104)
    hour = compare_row("sd", "knee", 2.0, _cell(0.008, 0.0215, 120.0), med, spread, reps,
                       hour_drift=_cell(0.0125, 0.0212, 103.0))
    assert hour["tpot_p99_s"]["hour_drift"]["within_target"] and target_counts([hour])["hour_drift"]["met"] == 3
    assert "hour_drift" not in target_counts([row])


def test_hour_drift_is_the_series_of_the_runs_before_the_measurement():
    """The fixed-batch runs' rounds give the drift series (calibration/fit_drift.py): a run whose rounds slow
    to 2x halfway reads ~1 then ~2 (scaled so that rounds drawn at the series' clock average 1); too few rounds
    give none; the profiles carry it in place of their own."""
    from bench.load_calibrate import hour_drift, with_drift_series
    from calibration.profile import load_preset

    t, rows = 0.0, []
    for i in range(400):
        d = 0.002 if i < 200 else 0.004
        rows.append({"round": i, "t0": t, "t1": t + d, "width": 2, "batch_index": 0})
        t += d
    series, info = hour_drift({"ar": rows, "sd": rows[:10]})
    assert info["n_runs"] == 1 and len(series) == info["n"] > 100
    lo, hi = series[5], series[-5]
    assert hi / lo == pytest.approx(2.0, rel=0.02)
    assert hour_drift({"ar": rows[:10]}) == ([], {"n_runs": 0})
    prof = load_preset("cpu-tinypair")
    got = with_drift_series({"ar": prof}, series)["ar"]
    assert list(got.executor.drift) == pytest.approx(series) and got.target is prof.target


def _bench_load():
    spec = importlib.util.spec_from_file_location("bench_load", ROOT / "bench" / "bench_load.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_drift_adjusted_prediction_scales_time_not_the_workload():
    """The prediction is the median over SIM_SEEDS seeds of each metric (as the measurement is the median over
    repeats); at a speed drift f the same simulations run with every time x f."""
    import numpy as np

    from calibration.profile import load_preset
    from saguaro_sim import SpecConfig
    from saguaro_sim.load import RequestStream, simulate_load

    mod = _bench_load()
    prof, spec = load_preset("cpu-tinypair"), SpecConfig(mode="sd", k=3, batch_size=2)
    args = mod.parse(["--batch", "2"])
    at_once = RequestStream(np.zeros(4), np.full(4, 40), np.full(4, 8))
    runs = [simulate_load(prof, spec, at_once, max_batch=2, seed=args.seed + i, ssd_width=args.ssd_width)
            for i in range(mod.SIM_SEEDS)]
    plain = {"tpot_p50_s": float(np.median([r.tpot_s["p50"] for r in runs])),
             "tpot_p99_s": float(np.median([r.tpot_s["p99"] for r in runs])),
             "throughput": float(np.median([r.throughput for r in runs]))}
    same = mod._drift_adjusted(prof, spec, at_once, 1.0, args)
    assert same == plain
    assert {k: v for k, v in mod._predict(prof, spec, at_once, args).items() if k in plain} == plain
    slow = mod._drift_adjusted(prof, spec, at_once, 1.5, args)   # all at t = 0: every time x 1.5
    assert slow["tpot_p99_s"] == pytest.approx(1.5 * plain["tpot_p99_s"])
    assert slow["throughput"] == pytest.approx(plain["throughput"] / 1.5)
    assert mod._drift_adjusted(prof, spec, at_once, None, args) is None


def test_bench_load_smoke(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    mod = _bench_load()
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
        # drift "beside" (the default): the fixed-batch runs around the cell's one repeat, measured / charged
        assert r["drift"] == pytest.approx(r["repeats"][0]["drift_sample"]) and r["drift"] > 0
        for m in ("tpot_p50_s", "tpot_p99_s", "throughput"):   # one repeat: no spread, its value is the range
            c = r[m]
            assert c["spread"] in (0.0, None) and c["range"][0] == c["range"][1] == c["measured"]
            assert c["beyond_noise"] == pytest.approx(abs(c["rel_error"]))
            assert c["drift_adjusted"]["predicted"] >= 0 and "within_target_beyond_noise" in c["drift_adjusted"]
            assert c["round_adjusted"]["predicted"] >= 0       # at the speed of the cell's own rounds
        assert r["round_speed"] == pytest.approx(r["repeats"][0]["phases"]["round_measured_over_charged"])
        pred, meas = r["phases"]["predicted"], r["phases"]["measured"]
        if r["mode"] == "ssd":   # both sides: the live rows (ssd_width "live": SSD moves live rows over finished)
            assert set(pred["rounds_by_width"]) <= {"1", "2"} and set(meas["rounds_by_width"]) <= {"1", "2"}
            assert data["ssd_width"] == "live"
        assert sum(meas["rounds_by_width"].values()) == meas["rounds"] > 0
    assert data["crossover"]["pair"] == "sd vs ssd" and len(data["crossover"]["measured"]) == 3
    assert data["load_average_start"] and "steal_share" in data
    assert data["drift"]["method"] == "beside" and data["drift"]["reference_s"] == [] and set(data["noise_floor"]) == {"tpot_p50_s", "tpot_p99_s",
                                                                                          "throughput"}
    assert {"plain", "plain_beyond_noise", "drift_adjusted", "drift_adjusted_beyond_noise",
            "round_adjusted"} <= set(data["targets_met"])
    assert all(Path(p).is_file() for p in data["traces"].values())
    # the after-idle fit: one light-load run per mode on a trace of its own (its temp file removed)
    assert set(data["after_idle"]) == {"sd", "ssd"}
    assert all(f["idle_gaps"] >= 0 and isinstance(f["after_idle"], list) for f in data["after_idle"].values())
    assert not list(Path(tmp_path).glob("bench_load-idle-*"))
    assert "n_runs" in data["hour_drift"]   # 4-token requests: too few rounds for a series, so no hour_drift side


def test_bench_load_probe_drift_keeps_the_older_speed_probe(tmp_path):
    """``--drift probe``: the bare-forward probe timed around the calibration steps (start, prefills, one per mode's
    fixed-batch run) and around every load run; the cell's drift is their ratio."""
    mod = _bench_load()
    out = tmp_path / "load.json"
    assert mod.main(["--modes", "ar", "--requests", "3", "--tokens", "4", "--repeats", "1", "--batch", "2",
                     "--drift", "probe", "--no-progress", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["drift"]["method"] == "probe" and len(data["drift"]["reference_s"]) == 3
    for r in data["rows"]:
        assert r["drift"] > 0 and r["repeats"][0]["drift_sample"] > 0


def test_cell_drift_is_the_median_beside_run_or_the_probe_ratio():
    from bench.load_calibrate import cell_drift
    assert cell_drift([1.2, 0.9, 1.1, None], [], "beside") == pytest.approx(1.1)
    assert cell_drift([None], [], "beside") is None
    assert cell_drift([2e-3, 2e-3], [1e-3, 1e-3], "probe") == pytest.approx(2.0)
