"""Round jitter and speed drift under load: each round draws a measured (verification, draft-side) multiplier
pair from profile.executor.jitter and is scaled by the machine's drift at its start (profile.executor.drift),
seeded and deterministic, leaving the futures (tokens, hits) as they were."""

import dataclasses

import numpy as np
import pytest

from calibration import load_preset
from calibration.errors import ConfigError
from saguaro_sim import SpecConfig
from saguaro_sim.load import RequestStream, poisson_stream, simulate_load

BASE = load_preset("cpu-tinypair")
AR, SSD = SpecConfig(mode="ar", k=0, budget=0), SpecConfig(mode="ssd", k=3, budget=8, backup="neural")


def _with_pairs(pairs, drift=()):
    return dataclasses.replace(BASE, executor=BASE.executor.with_jitter(pairs).with_drift(drift))


def test_jitter_is_seeded_and_off_means_no_pairs():
    st = poisson_stream(20.0, 40, 48, 24, seed=3)
    a, b = (simulate_load(BASE, SSD, st, max_batch=4, seed=1) for _ in range(2))
    assert np.array_equal(a.per_request["tpot_s"], b.per_request["tpot_s"])         # deterministic
    other = simulate_load(BASE, SSD, st, max_batch=4, seed=2)
    assert not np.array_equal(a.per_request["tpot_s"], other.per_request["tpot_s"])
    off = simulate_load(BASE, SSD, st, max_batch=4, seed=1, jitter=False)
    bare = simulate_load(_with_pairs(()), SSD, st, max_batch=4, seed=1)
    assert np.array_equal(off.per_request["tpot_s"], bare.per_request["tpot_s"])
    assert not np.array_equal(off.per_request["tpot_s"], a.per_request["tpot_s"])
    with pytest.raises(ConfigError, match="jitter"):
        simulate_load(BASE, SSD, st, max_batch=4, jitter="yes")


def test_ar_jitter_keeps_the_mean_round_and_spreads_tpot():
    """Pairs (0.5, 1.5) x AR step: the mean round stays the step (1000 rounds: 3 sigma = 5%), while the
    per-request TPOT spread (p99 / p50 of 60 eight-token requests, one row: nothing else interrupts them) widens
    from none to at least 20%."""
    prof = _with_pairs([[0.5, 1.0], [1.5, 1.0]])
    one = RequestStream(np.zeros(1), np.array([48]), np.array([1001]))
    flat, jit = (simulate_load(prof, AR, one, max_batch=1, jitter=j) for j in (False, True))
    assert (jit.sim_time_s - jit.prefill_s) == pytest.approx(flat.sim_time_s - flat.prefill_s, rel=0.05)
    st = poisson_stream(5.0, 60, 48, 8, seed=0)
    f, j = (simulate_load(prof, AR, st, max_batch=1, seed=0, jitter=x) for x in (False, True))
    assert f.tpot_s["p99"] == pytest.approx(f.tpot_s["p50"])
    assert j.tpot_s["p99"] > 1.2 * j.tpot_s["p50"]


def test_ssd_round_is_the_longer_jittered_side():
    """SSD's verification and build overlap: with anti-correlated pairs (0.5, 1.5) / (1.5, 0.5) a round lasts
    about 1.5 x the longer side where the two balance, so the decode is far slower than with its mean costs
    (E[max] > max E). With the build r x the verification (r <= 1) the mean round is (max(0.5, 1.5 r) + 1.5) / 2
    of the flat one: > 1.2 for r > 0.6 (the shipped cpu-tinypair at K 3, 8 branches, width 4: r ~ 0.7-1)."""
    prof = _with_pairs([[0.5, 1.5], [1.5, 0.5]])
    st = RequestStream(np.zeros(4), np.full(4, 48), np.full(4, 400))
    flat, jit = (simulate_load(prof, SSD, st, max_batch=4, seed=0, jitter=x) for x in (False, True))
    assert flat.rounds == jit.rounds                                   # the same futures
    assert (jit.sim_time_s - jit.prefill_s) > 1.2 * (flat.sim_time_s - flat.prefill_s)


def test_drift_scales_rounds_on_the_clock_and_spreads_requests_not_throughput():
    """A constant drift of 2 doubles every round and prefill; a drift alternating 0.75 / 1.5 every 100 ms
    (averaging 1 over rounds) leaves the busy time within 5% over 1000 rounds but spreads the TPOT of
    60 eight-token requests (p99 / p50 exactly 1 without it; with it the slowest request's TPOT at least 1.6x the
    fastest's: a request decodes inside one 100-ms stretch, the slow ones at 2x the fast ones; the p50 is not
    compared, since whether it falls in a slow or a fast stretch depends on where the shipped profile's rounds
    and prefills put the arrivals, and it took 1.22-1.40x of the p50 across two refits), which the jitter alone
    (none here) could not."""
    one = RequestStream(np.zeros(1), np.array([48]), np.array([1001]))
    flat, twice = (simulate_load(_with_pairs((), d), AR, one, max_batch=1) for d in ((), (2.0,)))
    assert twice.sim_time_s == pytest.approx(2 * flat.sim_time_s, rel=1e-9)
    wave = tuple([0.75] * 10 + [1.5] * 10)
    wave = tuple(v * float(np.mean(1 / np.asarray(wave))) for v in wave)   # rounds average 1
    w = simulate_load(_with_pairs((), wave), AR, one, max_batch=1)
    assert w.sim_time_s - w.prefill_s == pytest.approx(flat.sim_time_s - flat.prefill_s, rel=0.05)
    st = poisson_stream(5.0, 60, 48, 8, seed=0)
    f, d = (simulate_load(_with_pairs((), x), AR, st, max_batch=1, seed=0) for x in ((), wave))
    assert f.tpot_s["p99"] == pytest.approx(f.tpot_s["p50"])
    tpot = d.per_request["tpot_s"]
    assert tpot.max() > 1.6 * tpot.min() and d.tpot_s["p99"] > d.tpot_s["p50"]
    off = simulate_load(_with_pairs((), wave), AR, st, max_batch=1, seed=0, jitter=False)
    assert np.array_equal(off.per_request["tpot_s"], f.per_request["tpot_s"])   # jitter=False: neither


def test_rounds_after_an_idle_gap_pay_the_profiles_extra_shares():
    """after_idle (0.5, 0.25): requests 1 s apart (every one starts after a gap) decode their 1st round at 1.5x and
    their 2nd at 1.25x the step, so AR's TPOT over 10 tokens (rounds 2..10 after the first token) is (9 + 0.25) / 9
    of the flat one and the time to the first token (the prefill + round 1) 0.5 step longer; back to back (no
    gap) nothing changes, and without the jitter the shares still apply (they are no noise)."""
    cold = dataclasses.replace(BASE, executor=BASE.executor.with_jitter(()).with_drift(()).with_after_idle([0.5, 0.25]))
    flat = dataclasses.replace(BASE, executor=BASE.executor.with_jitter(()).with_drift(()))
    apart = RequestStream(np.arange(5) * 1.0 + 0.5, np.full(5, 48), np.full(5, 10))
    a, b = (simulate_load(p, AR, apart, max_batch=1, seed=0) for p in (cold, flat))
    assert a.tpot_s["p50"] == pytest.approx(b.tpot_s["p50"] * 9.25 / 9, rel=1e-9)
    step = b.tpot_s["p50"]
    assert a.ttft_s["p50"] - b.ttft_s["p50"] == pytest.approx(0.5 * step, rel=1e-6)
    together = RequestStream(np.zeros(5), np.full(5, 48), np.full(5, 10))
    c, d = (simulate_load(p, AR, together, max_batch=1, seed=0) for p in (cold, flat))
    assert np.array_equal(c.per_request["tpot_s"], d.per_request["tpot_s"])
    off = simulate_load(cold, AR, apart, max_batch=1, seed=0, jitter=False)
    assert off.tpot_s["p50"] == pytest.approx(a.tpot_s["p50"], rel=1e-9)


@pytest.mark.parametrize("case", ["separate", "beside", "time-sliced", "gap"])
def test_unit_jitter_round_is_the_flat_round_wherever_the_draft_runs(case):
    """Multipliers of 1 give the flat round exactly, hit or miss, also where the draft slows the verification beside
    it on one host (profile.beside_slowdown > 1: both sides slower while they overlap) or takes turns with it:
    a refit CPU profile (beside 1.16) once lost that slowdown in the jittered round only, and predicted SSD's
    load TPOT 5-15% fast in every cell of four load runs (2026-12-03)."""
    from saguaro_sim.load.costs import round_cost

    prof = {"beside": dataclasses.replace(BASE, beside_slowdown=1.3),      # gap: the verifier's own gap binds
            "gap": dataclasses.replace(BASE, beside_slowdown=1.3, verifier_gap_s=0.02)}.get(case, BASE)
    spec = SpecConfig(mode="ssd", k=3, budget=8, backup="neural",
                      **({"placement": "shared", "sharing": "time-sliced"} if case == "time-sliced" else {}))
    one = np.ones(3)
    for width in (1, 4):
        c = round_cost(prof, spec, width, 48.0, False)
        assert c.sharing == {"separate": "none", "time-sliced": "time-sliced"}.get(case, "concurrent")
        got = c.jittered(one.copy(), one.copy(), np.array([False, True, False]))
        hit, miss = max(c.base_s, c.floor_s), max(c.base_s + c.miss_s, c.floor_s)
        assert got == pytest.approx([hit, miss, hit], rel=1e-12)
        assert (c.floor_s > c.base_s + c.miss_s) == (case == "gap")
    if case == "beside":   # and the slowdown counts: the same profile without it is faster
        flat = round_cost(BASE, spec, 4, 48.0, False)
        assert flat.jittered(one.copy(), one.copy(), None)[0] < c.jittered(one.copy(), one.copy(), None)[0]
