"""Request streams and the vectorized round draws of the load simulator."""

import json

import numpy as np
import pytest

from calibration import load_preset
from calibration.errors import ConfigError
from saguaro_sim import SpecConfig
from saguaro_sim.analytic import accept_pmfs, hit_table
from saguaro_sim.load import Lengths, load_trace, poisson_stream, write_trace
from saguaro_sim.load.draws import FuturePool, RoundDraws, chain_sources

PROFILE = load_preset("h100-llama70b-tp4-llama1b")


def test_poisson_stream_rate_and_lengths():
    st = poisson_stream(8.0, 20000, Lengths(512, "lognormal", 0.5), Lengths(256, "uniform", 0.5), seed=3)
    gaps = np.diff(st.arrival_s)
    # exponential gaps: mean 1/8 s and coefficient of variation 1 (20,000 samples: both within 3%)
    assert np.mean(gaps) == pytest.approx(1 / 8, rel=0.03)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, rel=0.03)
    assert np.mean(st.prompt_tokens) == pytest.approx(512, rel=0.02)
    assert np.std(st.prompt_tokens) / np.mean(st.prompt_tokens) == pytest.approx(0.5, rel=0.05)
    assert st.output_tokens.min() >= 128 and st.output_tokens.max() <= 384
    assert st.offered_qps == pytest.approx(8.0, rel=0.03)


def test_split_thins_a_poisson_stream_to_rate_over_replicas():
    st = poisson_stream(12.0, 30000, 64, 16, seed=1).split(3, seed=0)
    assert st.offered_qps == pytest.approx(4.0, rel=0.04)
    gaps = np.diff(st.arrival_s)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, rel=0.05)   # still Poisson, not round-robin


def test_trace_round_trip_sorted_and_errors(tmp_path):
    st = poisson_stream(2.0, 50, 100, 20, seed=0)
    path = write_trace(st, tmp_path / "t.jsonl")
    back = load_trace(path)
    assert np.allclose(back.arrival_s, st.arrival_s, atol=1e-6)
    assert (back.output_tokens == st.output_tokens).all()
    lines = [json.dumps({"arrival_s": 5.0, "prompt_tokens": 3, "output_tokens": 2}),
             json.dumps({"arrival_s": 2.0, "prompt_tokens": 7, "output_tokens": 9})]
    (tmp_path / "u.jsonl").write_text("\n".join(lines) + "\n")
    u = load_trace(tmp_path / "u.jsonl")
    assert u.arrival_s.tolist() == [0.0, 3.0] and u.prompt_tokens.tolist() == [7, 3]
    (tmp_path / "bad.jsonl").write_text('{"arrival_s": 1, "prompt_tokens": 3}\n')
    with pytest.raises(ConfigError, match="bad.jsonl:1: output_tokens"):
        load_trace(tmp_path / "bad.jsonl")
    (tmp_path / "neg.jsonl").write_text('{"arrival_s": 1, "prompt_tokens": 0, "output_tokens": 3}\n')
    with pytest.raises(ConfigError, match="prompt_tokens"):
        load_trace(tmp_path / "neg.jsonl")
    with pytest.raises(ConfigError, match="not found"):
        load_trace(tmp_path / "missing.jsonl")


def _chain_loop(s0, hp, hb):
    s = np.zeros(hp.shape, dtype=np.int64)
    for i in range(hp.shape[0]):
        cur = s0[i]
        for j in range(hp.shape[1]):
            s[i, j] = cur
            cur = 0 if (hp[i, j] if cur == 0 else hb[i, j]) else 1
    return s


def test_vectorized_chain_equals_the_round_by_round_loop():
    rng = np.random.default_rng(0)
    for p in (0.1, 0.5, 0.9):
        hp, hb = rng.random((40, 60)) < p, rng.random((40, 60)) < 1 - p
        s0 = rng.integers(0, 2, 40)
        assert (chain_sources(s0, hp, hb) == _chain_loop(s0, hp, hb)).all()


def test_futures_reach_exactly_left_tokens_with_the_expected_rates():
    spec = SpecConfig(mode="ssd", k=4, budget=20)
    pmf_p, pmf_b = accept_pmfs(PROFILE, spec, False)
    draws = RoundDraws(np.random.default_rng(1), pmf_p, pmf_b, hit_table(PROFILE, spec))
    pool = FuturePool(draws, chunk=100)
    for src in (0, 1):
        for left in (1, 7, 100, 101, 250, 999):
            tok, hit = pool.take(src, left)
            assert tok.sum() == left and (tok >= 1).all() and tok.max() <= spec.k + 1 and len(hit) == len(tok)
    # tokens per round against the chain's stationary mix of primary / backup acceptance (9,000+ rounds: 3%);
    # short pool rows (20 tokens) joined ~5 per 100 tokens: joining must not cut rounds short
    short = FuturePool(draws, chunk=20)
    many = np.concatenate([short.take(0, 5000)[0][:-1] for _ in range(8)])
    table = hit_table(PROFILE, spec)
    n = np.arange(1, spec.k + 2)
    h_p, h_b = pmf_p @ table[0], pmf_b @ table[1]
    p_hit = h_b / (1 - h_p + h_b)
    expected = p_hit * (pmf_p @ n) + (1 - p_hit) * (pmf_b @ n)
    assert many.mean() == pytest.approx(expected, rel=0.03)
