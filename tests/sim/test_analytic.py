"""Closed forms: SD expectation, Theorem 7 / Corollary 16, stationary p_hit, b*, predict()."""

import time

import numpy as np
import pytest

from calibration import AcceptanceModel, ConfigError, HitCurve, LatencyModel, Profile
from saguaro_sim import SpecConfig, Workload
from saguaro_sim.analytic import (
    critical_batch_size,
    expected_p_hit,
    message_bytes,
    predict,
    resolve_fanouts,
    sd_expected_tokens,
    sd_round_time,
    sd_speedup,
    ssd_speedup,
    stationary_p_hit,
    uses_fast_backup,
)

W = Workload(num_sequences=16, output_tokens=512, prompt_tokens=128)


def toy(alpha=0.8, draft=0.001, target=0.02, fast_s=0.0004, c=0.3, r=0.5, link=0.0):
    return Profile(name="toy", target=LatencyModel.constant(target), draft=LatencyModel.constant(draft),
                   link_s=link, acceptance=AcceptanceModel.geometric(alpha), hits=HitCurve.power_law(c, r),
                   fast_backup_s=fast_s)


def test_sd_expected_tokens_matches_formula_and_edges():
    assert sd_expected_tokens(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert sd_expected_tokens(1.0, 4) == 5.0
    assert sd_expected_tokens(0.0, 7) == 1.0
    # agrees with the acceptance model's pmf-based expectation
    assert sd_expected_tokens(0.63, 6) == pytest.approx(AcceptanceModel.geometric(0.63).expected_tokens(6))


def test_sd_speedup_and_round_time():
    assert sd_speedup(0.8, 4, t_draft=0.05) == pytest.approx(3.3616 / 1.2)
    p = toy()
    assert sd_round_time(p, 4, 1, 100) == pytest.approx(4 * 0.001 + 0.02)


def test_ssd_speedup_theorem7_by_hand():
    # p=0.9, E_hit=E_miss=3, T_p=0.5, T_b=0.2: 3 / (0.9*1 + 0.1*1.2)
    assert ssd_speedup(0.9, 3.0, 3.0, 0.5, 0.2) == pytest.approx(3.0 / 1.02)
    # T_p > 1: the verifier waits for the cache
    assert ssd_speedup(1.0, 3.0, 3.0, 1.5, 0.2) == pytest.approx(2.0)
    # Corollary 16: p^b in the denominator, so bigger batches are slower per sequence
    s = [ssd_speedup(0.9, 3.0, 3.0, 0.5, 0.2, batch=b) for b in (1, 2, 4, 8)]
    assert all(a > b for a, b in zip(s, s[1:]))
    assert s[3] == pytest.approx(3.0 / (0.9 ** 8 + (1 - 0.9 ** 8) * 1.2))


@pytest.mark.parametrize("field,args", [("p_hit", (1.5, 3, 3, 0.5, 0.2)), ("t_b", (0.5, 3, 3, 0.5, -1.0)),
                                        ("batch", (0.5, 3, 3, 0.5, 0.2, 0))])
def test_ssd_speedup_bad_input_names_field(field, args):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        ssd_speedup(*args)


def test_stationary_p_hit_solves_the_chain():
    assert stationary_p_hit(0.7, 0.7) == pytest.approx(0.7)
    assert stationary_p_hit(1.0, 0.0) == 1.0
    h_p, h_b = 0.85, 0.4
    p = stationary_p_hit(h_p, h_b)
    assert p == pytest.approx(p * h_p + (1 - p) * h_b)  # fixed point of the primary/backup chain


def test_predict_equals_corollary16_when_its_assumptions_hold():
    p = toy()
    for b in (1, 3, 16):
        for backup in ("neural", "fast"):
            spec = SpecConfig(mode="ssd", k=4, budget=20, batch_size=b, backup=backup)
            pr = predict(p, spec, W)
            e = AcceptanceModel.geometric(0.8).expected_tokens(4)
            e_miss = e if backup == "neural" else 1.0
            t_b = 4 * 0.001 if backup == "neural" else 0.0004
            t_p = 0.001 + 4 * 0.001
            want = ssd_speedup(pr.p_hit, e, e_miss, t_p / 0.02, t_b / 0.02, batch=b)
            assert pr.speedup_vs_ar == pytest.approx(want, rel=1e-9)
            assert pr.throughput == pytest.approx(b * pr.tokens_per_s_per_seq)


def test_predict_sd_and_ar():
    p = toy()
    sd = predict(p, SpecConfig(mode="sd", k=4), W)
    assert sd.speedup_vs_ar == pytest.approx(sd_speedup(0.8, 4, 0.001 / 0.02))
    ar = predict(p, SpecConfig(mode="ar", k=0, budget=0), W)
    assert ar.tokens_per_s_per_seq == pytest.approx(50.0) and ar.speedup_vs_ar == 1.0


def test_ssd_never_slower_than_sd_with_neural_backup_and_zero_link():
    for alpha in (0.3, 0.6, 0.9):
        p = toy(alpha=alpha)
        for k in (2, 4, 8):
            sd = predict(p, SpecConfig(mode="sd", k=k), W).tokens_per_s_per_seq
            ssd = predict(p, SpecConfig(mode="ssd", k=k, budget=4 * (k + 1)), W).tokens_per_s_per_seq
            assert ssd >= sd * (1 - 1e-12)


def test_p_hit_monotone_in_budget():
    p = toy(c=0.6, r=0.45)
    for shape in ("geometric", "uniform"):
        prev = -1.0
        for budget in range(1, 80, 3):
            spec = SpecConfig(mode="ssd", k=5, budget=budget, fanout_shape=shape)
            h = expected_p_hit(p, spec)
            assert h >= prev - 1e-12, (shape, budget)
            prev = h
        assert prev > 0.5


def test_expected_p_hit_rejects_wrong_length_fanout():
    with pytest.raises(ConfigError, match="^fanout:"):
        expected_p_hit(toy(), SpecConfig(k=4), fanout=(1, 2, 3))


def test_critical_batch_size_separates_backups():
    p = toy(c=0.5, r=0.4, draft=0.002, fast_s=0.0002)
    spec = SpecConfig(mode="ssd", k=4, budget=20)
    b_star = critical_batch_size(p, spec, W)
    assert b_star is not None and b_star > 1

    def rate(b, backup):
        return predict(p, spec.replace(batch_size=b, backup=backup), W).tokens_per_s_per_seq

    assert rate(b_star, "fast") > rate(b_star, "neural")
    assert all(rate(b, "fast") <= rate(b, "neural") for b in range(1, b_star))
    assert not uses_fast_backup(p, spec.replace(backup="auto", batch_size=b_star - 1), W)
    assert uses_fast_backup(p, spec.replace(backup="auto", batch_size=b_star), W)
    auto = predict(p, spec.replace(backup="auto", batch_size=b_star + 2), W)
    assert auto.backup == "fast"
    # a fast backup that is no faster than the neural one never wins
    assert critical_batch_size(toy(draft=0.0001, fast_s=0.01), spec, W, max_batch=64) is None


def test_message_bytes_full_rows_only_when_sampling():
    greedy = message_bytes(SpecConfig(k=4, temperature=0.0), 32000, batch=2)
    hot = message_bytes(SpecConfig(k=4, temperature=1.0), 32000, batch=2)
    assert greedy[0] == hot[0] == 2 * 4 * 8                  # int64 [B, 4] outcome, as the executor sends it
    assert greedy[1] == (2 + 1) * 10 * 8                      # float64 header [B + 1, max(3 + K, 10)]
    assert hot[1] > 100 * greedy[1] and hot[1] == greedy[1] + 2 * 4 * 32000 * 4   # + float32 q [B, K, V]


def test_link_latency_slows_ssd():
    spec = SpecConfig(mode="ssd", k=4, budget=20)
    assert predict(toy(link=0.002), spec, W).tokens_per_s_per_seq < predict(toy(), spec, W).tokens_per_s_per_seq


def test_resolve_fanouts_geometric_sums_to_budget():
    primary, miss = resolve_fanouts(toy(), SpecConfig(k=4, budget=23))
    assert sum(primary) == 23 and primary == miss
    assert primary[-1] == max(primary)  # F_K holds the all-accepted mass


def test_predict_is_cheap():
    p, spec = toy(), SpecConfig(mode="ssd", k=6, budget=40, batch_size=8)
    predict(p, spec, W)
    t = time.perf_counter()
    for _ in range(50):
        predict(p, spec, W)
    assert (time.perf_counter() - t) / 50 < 0.005
    assert np.isfinite(predict(p, spec, W).tokens_per_s_per_seq)
