"""saguaro_sim.plan: fewest replicas meeting the SLOs per load and mode, the cheapest mode, crossovers."""

import numpy as np
import pytest

import saguaro_sim
from calibration import load_preset
from calibration.errors import ConfigError
from saguaro_sim.load import (
    SLO,
    ConfigSchedule,
    crossovers,
    load_trace,
    poisson_stream,
    simulate_load,
    write_trace,
)
from saguaro_sim.load.planner import _stream_for

PROFILE = load_preset("h100-llama70b-tp4-llama1b")


@pytest.fixture(scope="module")
def plan70b():
    return saguaro_sim.plan(PROFILE, [1, 4, 16], SLO(30, 500), num_requests=300, workers=1)


def test_ssd_overtakes_sd_once_a_tight_tpot_target_limits_sd_batches():
    """On the 70B TP4 preset, a 13 ms p99 TPOT target is just above SD's unloaded TPOT (about 10 ms): at 1 req/s
    one SD replica (4 GPUs) meets it and SSD's fifth GPU buys nothing; under more load SD must keep its batches
    small (more replicas) while SSD's lower per-token latency carries more rows per replica, so SSD needs fewer
    GPUs: the SSD-vs-SD crossover lies on this grid, from SD to SSD."""
    p = saguaro_sim.plan(PROFILE, [1, 4, 16], SLO(13, 500), num_requests=300, modes=("sd", "ssd"), max_replicas=64,
                         workers=1)
    assert p.best[0]["mode"] == "sd" and p.row(1.0, "sd")["gpus"] < p.row(1.0, "ssd")["gpus"]
    assert p.row(16.0, "ssd")["gpus"] < p.row(16.0, "sd")["gpus"]
    cross = [c for c in p.crossovers if c["pair"] == "ssd vs sd"]
    assert cross and cross[0]["from"] == "sd" and cross[0]["to"] == "ssd"
    assert p.settings["max_replicas"] == 64


def test_with_a_loose_target_sd_is_cheapest_and_beats_ar_on_gpus(plan70b):
    """With 30 ms / 500 ms, SD's 4 GPUs meet the SLO wherever SSD's 5 do, and SD needs no more GPUs than AR."""
    for q in plan70b.qps:
        assert plan70b.row(q, "sd")["gpus"] <= plan70b.row(q, "ar")["gpus"]
        assert plan70b.row(q, "sd")["gpus"] <= plan70b.row(q, "ssd")["gpus"]
    assert [b["mode"] for b in plan70b.best] == ["sd"] * len(plan70b.qps)


def test_replica_counts_are_the_fewest_that_meet_the_slo(plan70b):
    for r in plan70b.rows:
        assert r["meets_slo"] and r["tpot_ms"]["p99"] <= 30 and r["ttft_ms"]["p99"] <= 500
        if r["replicas"] > 1:   # one replica fewer misses the SLO (same stream the planner used)
            stream = _stream_for(r["qps"], r["replicas"] - 1, None, *_lengths(plan70b), 300, 0)
            sched = ConfigSchedule.from_dict(plan70b.schedules[r["mode"]])
            assert not simulate_load(PROFILE, sched, stream, 64, 0, SLO(30, 500)).meets_slo
    for mode in ("ar", "sd", "ssd"):
        gpus = [plan70b.row(q, mode)["gpus"] for q in plan70b.qps]
        assert gpus == sorted(gpus)
        cost = [plan70b.row(q, mode)["usd_per_million_tokens"] for q in plan70b.qps]
        assert cost == sorted(cost, reverse=True)      # more load on the same GPUs: cheaper tokens
    assert plan70b.row(1.0, "ssd")["gpus"] == 5 and plan70b.row(1.0, "ar")["gpus"] == 4


def _lengths(plan):
    from saguaro_sim.load import Lengths

    return Lengths(**plan.settings["prompt"]), Lengths(**plan.settings["output"])


def test_crossovers_of_synthetic_rows():
    def row(q, mode, gpus, tpot=10.0):
        return {"qps": q, "mode": mode, "gpus": gpus, "tpot_ms": {"p99": tpot}}

    rows = [row(1, "sd", 4), row(1, "ar", 4, 20), row(2, "sd", 8), row(2, "ar", 4), row(4, "sd", None),
            row(4, "ar", 8)]
    assert crossovers(rows, [1, 2, 4], [("sd", "ar")]) == [
        {"pair": "sd vs ar", "from": "sd", "to": "ar", "between_qps": [1, 2]}]
    assert crossovers(rows[:2], [1], [("sd", "ar")]) == []


def test_plan_from_a_trace_and_bad_inputs(tmp_path):
    path = write_trace(poisson_stream(2.0, 200, 256, 64, seed=4), tmp_path / "t.jsonl")
    p = saguaro_sim.plan(PROFILE, [2.0], trace=load_trace(path), modes=("sd",), num_requests=200, workers=1)
    assert p.settings["trace"] and p.best[0]["mode"] == "sd" and p.best[0]["replicas"] == 1
    scaled = _stream_for(8.0, 1, load_trace(path), None, None, 0, 0)
    assert scaled.offered_qps == pytest.approx(8.0)
    assert np.array_equal(scaled.output_tokens, load_trace(path).output_tokens)
    with pytest.raises(ConfigError, match=r"qps\[0\]"):
        saguaro_sim.plan(PROFILE, [0.0])
    with pytest.raises(ConfigError, match="modes"):
        saguaro_sim.plan(PROFILE, [1.0], modes=("xd",))
    with pytest.raises(ConfigError, match="num_requests"):
        saguaro_sim.plan(PROFILE, [1.0], num_requests=2)


def test_parallel_sweep_matches_the_inline_one():
    kw = dict(qps=[2.0, 8.0], slo=SLO(30, 500), num_requests=100, modes=("ar", "sd"))
    a = saguaro_sim.plan(PROFILE, workers=1, **kw)
    b = saguaro_sim.plan(PROFILE, workers=2, **kw)
    assert a.rows == b.rows and a.best == b.best


def test_shared_placement_counts_no_draft_gpu_and_is_slower_than_separate():
    """SSD with its draft on the target's GPUs (placement shared, time-sliced) occupies the target's 4 GPUs per
    replica, not 5, and its rounds serialize draft and target work, so its unloaded p50 TPOT is above the
    separate placement's; the settings record the placement."""
    kw = dict(num_requests=100, modes=("ssd",), workers=1)
    sep = saguaro_sim.plan(PROFILE, [1], SLO(1000, 10_000), **kw)
    sh = saguaro_sim.plan(PROFILE, [1], SLO(1000, 10_000), placement="shared", **kw)
    assert sep.row(1.0, "ssd")["gpus"] == 5 and sh.row(1.0, "ssd")["gpus"] == 4
    assert sh.row(1.0, "ssd")["tpot_ms"]["p50"] > sep.row(1.0, "ssd")["tpot_ms"]["p50"]
    assert sh.settings["placement"] == "shared" and sh.schedules["ssd"][0]["placement"] == "shared"
