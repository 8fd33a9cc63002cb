"""bench_fidelity's measurement method: interleaved run order, medians over repeats, the noise floor and
errors beyond it (pure helpers, no runs)."""

from __future__ import annotations

import pytest

from bench.fidelity_stats import (
    beyond_noise,
    error_summary,
    interleaved_order,
    median_of,
    noise_floor,
    repeat_spread,
    speed_drift,
)
from calibration import ConfigError, Measurements

CALIB = ["calib_0", "calib_1", "calib_2"]
TESTS = [f"t{i}" for i in range(8)]


def test_interleaved_order_round_robin_shuffled_with_a_fixed_seed_per_pass():
    order = interleaved_order(CALIB, TESTS, repeats=3, seed=0)
    assert len(order) == 3
    for names in order:  # every config exactly once per pass
        assert sorted(names) == sorted(CALIB + TESTS)
    assert set(order[0][:3]) == set(CALIB)  # pass 0: calibration first (the tests are pinned on it)
    assert order == interleaved_order(CALIB, TESTS, repeats=3, seed=0)  # deterministic
    assert order[1] != order[2]  # each pass its own shuffle
    assert any(n in CALIB for n in order[1][3:])  # later passes mix calibration and tests
    assert interleaved_order(CALIB, TESTS, repeats=3, seed=1) != order
    assert interleaved_order(CALIB, TESTS, repeats=2, seed=0) == order[:2]  # pass i always uses seed + i
    with pytest.raises(ConfigError, match="repeats"):
        interleaved_order(CALIB, TESTS, repeats=0)
    with pytest.raises(ConfigError, match="unique"):
        interleaved_order(CALIB, ["calib_0"], repeats=1)


def test_spread_median_and_beyond_noise():
    assert repeat_spread([100.0, 110.0, 90.0]) == pytest.approx(0.2)
    assert repeat_spread([250.0]) == 0.0
    with pytest.raises(ConfigError):
        repeat_spread([])
    with pytest.raises(ConfigError):
        repeat_spread([0.0, 0.0])
    assert median_of([{"a": 1.0, "h": None}, {"a": 5.0, "h": 0.5}, {"a": 2.0, "h": 0.7}]) == {"a": 2.0, "h": None}
    assert median_of([{"a": 1.0, "h": 0.2}, {"a": 3.0, "h": 0.4}]) == {"a": 2.0, "h": pytest.approx(0.3)}
    assert beyond_noise(-0.30, 0.20) == pytest.approx(0.10)
    assert beyond_noise(0.10, 0.20) == 0.0
    floor = noise_floor({"a": 0.1, "b": 0.5, "c": 0.2})
    assert floor == {"n": 3, "median_spread": pytest.approx(0.2), "max_spread": pytest.approx(0.5), "worst": "b"}


def test_speed_drift_is_the_ratio_of_median_probes():
    assert speed_drift([0.12, 0.15, 0.11], [0.10, 0.09, 0.11]) == pytest.approx(1.2)   # a 1.2x slower machine
    assert speed_drift([0.1, None], [0.1]) is None and speed_drift([], [0.1]) is None
    assert noise_floor({})["n"] == 0


def _row(name, pred, meas, spread, tpr=(3.0, 3.0), hit=(None, None)):
    return {"name": name, "rel_error": (pred - meas) / meas, "spread": spread,
            "predicted": {"tokens_per_s": pred, "tokens_per_round": tpr[0], "hit_rate": hit[0]},
            "measured": {"tokens_per_s": meas, "tokens_per_round": tpr[1], "hit_rate": hit[1]}}


def test_error_summary_puts_errors_next_to_the_noise_floor():
    rows = [_row("a", 110, 100, 0.05, hit=(0.9, 0.8)), _row("b", 150, 200, 0.10, tpr=(3.3, 3.0)),
            _row("c", 300, 300, 0.40), _row("d", 380, 400, 0.02)]
    s = error_summary(rows)
    assert s["median_abs_rel_error"] == pytest.approx((0.05 + 0.10) / 2) and s["max_abs_rel_error"] == 0.25
    assert s["worst"] == "b" and s["spearman"] == pytest.approx(1.0)
    assert s["noise_floor"]["median_spread"] == pytest.approx(0.075) and s["noise_floor"]["worst"] == "c"
    assert s["max_beyond_noise"] == pytest.approx(0.15) and s["worst_beyond_noise"] == "b"
    assert s["median_beyond_noise"] == pytest.approx((0.03 + 0.05) / 2)  # 0.05, 0.15, 0, 0.03
    assert s["tokens_per_round_max_rel_error"] == pytest.approx(0.1)
    assert s["hit_rate_median_abs_error"] == pytest.approx(0.1)
    with pytest.raises(ConfigError):
        error_summary([])


def _meas(tokens_per_s, spec):
    """A run with 3 steady rounds (after a first one) decoding at a known rate, 2 tokens per round."""
    rounds = [{"batch_index": 0, "t0": i * 2 / tokens_per_s, "t1": (i + 1) * 2 / tokens_per_s, "accepted": [1]}
              for i in range(4)]
    return Measurements(meta={"spec": spec}, rounds=rounds, totals={"hit_rate": 0.9, "mean_tokens_per_round": 2.0})


def test_compare_takes_medians_and_keeps_every_repeat():
    from bench.bench_fidelity import compare

    spec = {"mode": "ssd", "k": 1, "temperature": 0.0}
    runs = [_meas(r, spec) for r in (100.0, 140.0, 120.0)]
    preds = [{"tokens_per_s": 150.0, "tokens_per_s_per_seq": 150.0, "hit_rate": 0.9, "tokens_per_round": 2.0}] * 3
    row = compare("x", runs, preds)
    assert row["measured"]["tokens_per_s"] == pytest.approx(120.0)
    assert [m["tokens_per_s"] for m in row["repeats"]] == pytest.approx([100.0, 140.0, 120.0])
    assert row["rel_error"] == pytest.approx(0.25) and row["spread"] == pytest.approx(40 / 120)
    assert row["beyond_noise"] == 0.0  # a 25% error inside a 33% spread
    assert row["predicted"]["tokens_per_s"] == 150.0 and len(row["predicted_repeats"]) == 3


def test_test_set_is_unseen_and_covers_the_issue():
    from bench.fidelity_configs import CALIBRATION, QUICK_TESTS, TESTS, coverage

    c = coverage(TESTS)
    assert c["n"] >= 15 and c["batch"] == [1, 2, 4, 8] and c["temperature"] == [0.0, 0.7, 1.0]
    assert c["backup"] == ["fast", "neural"] and c["sampler_c_below_1"] and c["shape"] == ["geometric", "uniform"]
    assert set(range(2, 9)) <= set(c["k"])
    assert not {s for _, s in TESTS} & set(CALIBRATION)          # the fit never sees a test config
    assert set(QUICK_TESTS) <= {n for n, _ in TESTS}


def test_steal_share_from_proc_stat_snapshots():
    from bench.machine_speed import cpu_times, steal_share

    a = {"user": 100, "nice": 0, "system": 50, "idle": 800, "iowait": 0, "irq": 0, "softirq": 0, "steal": 10}
    b = dict(a, user=180, idle=900, steal=30)
    assert steal_share(a, b) == pytest.approx(20 / 200)
    assert steal_share(None, b) is None
    now = cpu_times()
    assert now is None or set(now) >= {"user", "idle", "steal"}


def test_measured_rate_stops_each_row_at_max_new_tokens():
    """The last round's accepted + 1 can pass max_new_tokens; only the tokens kept count."""
    from saguaro.pipeline import decode_rate

    rounds = [{"batch_index": 0, "seq": [0], "t0": float(i), "t1": i + 1.0, "accepted": [3]} for i in range(3)]
    meas = Measurements(meta={"max_new_tokens": 10}, rounds=rounds)
    assert decode_rate(meas) == pytest.approx((4 + 2) / 2)      # round 0 (prefill) left out; 4 + 4 + 2 = 10


def test_wide_batches_decode_more_requests_so_every_run_lasts_about_as_long():
    """8 requests at batch 1-2, 8 x batch / 2 beyond (cycled prompts, same mean length); runs saved before
    (no prompts_by_batch in collect.json) replay with 8 whatever the batch."""
    import argparse

    from bench.bench_fidelity import _workload, rows_for

    assert [rows_for(8, b) for b in (1, 2, 4, 6, 8)] == [8, 8, 16, 24, 32]
    args = argparse.Namespace(prompts=8, tokens=96)
    p1, w1 = _workload(args, 1)
    p8, w8 = _workload(args, 8)
    assert len(p1) == w1.num_sequences == 8 and len(p8) == w8.num_sequences == 32
    assert p8[:8] == p1 and p8[8:16] == p1 and w8.prompt_tokens == w1.prompt_tokens
    assert _workload(args, 8, by_batch=False)[1].num_sequences == 8
