"""The load simulator against the fixed-batch simulator, queueing laws, and load behaviour."""

import numpy as np
import pytest

from calibration import load_preset
from calibration.errors import ConfigError
from saguaro_sim import SpecConfig, Workload, simulate
from saguaro_sim.load import SLO, ConfigSchedule, RequestStream, best_schedule, poisson_stream, simulate_load
from saguaro_sim.load.costs import prefill_cost

PROFILE = load_preset("h100-llama70b-tp4-llama1b")
SPECS = [SpecConfig(mode="ar", k=0, budget=0), SpecConfig(mode="sd", k=4),
         SpecConfig(mode="ssd", k=4, budget=20, backup="neural"), SpecConfig(mode="ssd", k=6, budget=28, backup="fast")]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.mode}-{s.backup}")
def test_all_at_once_full_batch_matches_the_fixed_batch_simulator(spec):
    """b requests arriving at t=0 into b slots decode like the fixed-batch simulator's batch of b (the load
    simulator also prefills first; every output token comes from a decode round, as in the executor, so
    rates are taken from the prefill's end): the mean per-request tokens/s within 3%, the batch's tokens/s
    within 6% (it ends with the slowest of 32 rows: a few % of noise)."""
    b, out, prompt = 32, 512, 256
    fixed = simulate(PROFILE, spec.replace(batch_size=b), Workload(b, out, prompt), seed=0)
    stream = RequestStream(np.zeros(b), np.full(b, prompt), np.full(b, out))
    res = simulate_load(PROFILE, spec, stream, max_batch=b, seed=0)
    first = res.per_request["ttft_s"]
    assert np.allclose(first, first[0])                          # one prefill, one first round for the batch
    t_target, t_draft = prefill_cost(PROFILE, spec, b, prompt)
    if spec.mode != "ssd":                                       # SSD's draft side adds the backup's speculation
        assert res.prefill_s == pytest.approx(t_target + t_draft)
    assert res.prefills == 1 and first[0] > res.prefill_s        # the first token comes with the first round
    per_request = np.mean(out / (res.per_request["latency_s"] - res.prefill_s))
    assert per_request == pytest.approx(fixed.tokens_per_s_per_seq, rel=0.03)
    assert b * out / (res.sim_time_s - res.prefill_s) == pytest.approx(fixed.throughput, rel=0.06)


@pytest.mark.parametrize("mode", ["ar", "sd", "ssd"])
def test_littles_law_and_utilisation_at_low_load(mode):
    """Little's law: time-mean live rows = arrival rate x mean time in decode (within 5%); at 5% load the
    target is busy about rate x (one request's prefill + decode time alone) (within 10%)."""
    sched = best_schedule(PROFILE, mode, 64, 256, 128)
    alone = simulate_load(PROFILE, sched, RequestStream(np.zeros(1), np.array([256]), np.array([128])))
    service = alone.sim_time_s
    rate = 0.05 / service
    st = poisson_stream(rate, 600, 256, 128, seed=5)
    res = simulate_load(PROFILE, sched, st, max_batch=64, seed=1)
    lam = len(st) / res.sim_time_s
    in_decode = res.per_request["latency_s"] - res.per_request["ttft_s"]
    assert res.mean_batch == pytest.approx(lam * np.mean(in_decode), rel=0.05)
    assert res.target_utilization == pytest.approx(lam * service * alone.target_utilization, rel=0.10)
    assert res.ttft_s["p50"] == pytest.approx(alone.ttft_s["p50"], rel=0.10)   # hardly anyone queues


@pytest.mark.parametrize("mode", ["ar", "sd", "ssd"])
def test_p99_latencies_grow_with_load(mode):
    """Below saturation (every mode keeps up at 6 req/s) p99 TPOT and the mean batch rise with load; far
    above it (40 req/s) requests queue and p99 TTFT is many times the light-load one."""
    sched = best_schedule(PROFILE, mode, 64)
    runs = [simulate_load(PROFILE, sched, poisson_stream(q, 800, 512, 256, seed=2), max_batch=64, seed=0)
            for q in (0.5, 2.0, 6.0, 40.0)]
    tpot = [r.tpot_s["p99"] for r in runs[:3]]
    batch = [r.mean_batch for r in runs[:3]]
    assert tpot == sorted(tpot) and tpot[-1] > 1.2 * tpot[0]
    assert batch == sorted(batch)
    assert runs[3].ttft_s["p99"] > 10 * runs[0].ttft_s["p99"]


def test_slo_goodput_gpus_and_cost():
    sched = best_schedule(PROFILE, "ssd", 64)
    res = simulate_load(PROFILE, sched, poisson_stream(2.0, 400, 512, 256, seed=0), 64, slo=SLO(30, 500),
                        gpu_hour_usd=3.0)
    assert res.gpus == 5 and res.meets_slo and res.slo_attainment == 1.0
    assert res.goodput_qps == pytest.approx(res.request_throughput)
    assert res.tokens_per_s_per_gpu == pytest.approx(res.throughput / 5)
    assert res.usd_per_million_tokens == pytest.approx(5 * 3.0 / 3600 / res.throughput * 1e6)
    strict = simulate_load(PROFILE, sched, poisson_stream(2.0, 400, 512, 256, seed=0), 64, slo=SLO(3, 500))
    assert not strict.meets_slo and strict.slo_attainment < 0.5
    assert simulate_load(PROFILE, best_schedule(PROFILE, "sd", 8), poisson_stream(1.0, 50, 64, 32), 8).gpus == 4


def test_the_schedule_picks_the_config_of_the_live_batch():
    """A schedule whose entry for large batches drafts fewer tokens: under heavy load (full batch) it runs
    like that entry alone, under light load (one row) like the first entry alone."""
    small, large = SpecConfig(mode="sd", k=8), SpecConfig(mode="sd", k=1)
    sched = ConfigSchedule(((1, small), (4, large)))
    heavy = poisson_stream(1000.0, 300, 128, 128, seed=0)
    light = poisson_stream(0.05, 60, 128, 128, seed=0)
    for stream, alone in ((heavy, large), (light, small)):
        a = simulate_load(PROFILE, sched, stream, 16, seed=0)
        b = simulate_load(PROFILE, alone, stream, 16, seed=0)
        assert a.tpot_s["p50"] == pytest.approx(b.tpot_s["p50"], rel=0.05)


@pytest.mark.parametrize("mode", ["ar", "sd", "ssd"])
def test_requests_arriving_during_a_prefill_join_one_round_later(mode):
    """The executor admits once per round boundary (saguaro_exec/engine/refill.py): request 0 is prefilled
    alone, the two that arrive during its prefill wait for the next boundary, after one decode round of row 0,
    and join in one prefill; in AR they finish together, one round after row 0 (the simulator used to prefill
    them back to back before any decode round, which made row 0 one group with them... and then three)."""
    spec = {"ar": SPECS[0], "sd": SPECS[1], "ssd": SPECS[2]}[mode]
    t_first = prefill_cost(PROFILE, spec, 1, 256)[0]
    stream = RequestStream(np.array([0.0, 0.2 * t_first, 0.4 * t_first]), np.full(3, 256), np.full(3, 64))
    res = simulate_load(PROFILE, spec, stream, max_batch=4, seed=0)
    assert res.prefills == 2
    widths = {int(w): n for w, n in res.rounds_by_width.items()}
    assert widths.get(1, 0) >= 1 and widths.get(3, 0) >= 1
    pr = res.per_request
    first, finish = pr["arrival_s"] + pr["ttft_s"], pr["arrival_s"] + pr["latency_s"]
    assert first[0] < first[1] == pytest.approx(first[2])
    if mode == "ar":                     # SD / SSD rows accept their own lengths and leave apart
        assert finish[0] < finish[1] == pytest.approx(finish[2])


def test_bad_inputs_raise_config_errors_naming_the_field():
    st = poisson_stream(1.0, 10, 64, 16)
    with pytest.raises(ConfigError, match="max_batch"):
        simulate_load(PROFILE, SPECS[0], st, max_batch=0)
    with pytest.raises(ConfigError, match="stream"):
        simulate_load(PROFILE, SPECS[0], [1, 2, 3])
    with pytest.raises(ConfigError, match="rate_qps"):
        poisson_stream(0.0, 10)
    with pytest.raises(ConfigError, match="schedule"):
        ConfigSchedule(((2, SPECS[1]),))
