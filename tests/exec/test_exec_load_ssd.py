"""SSD under load (RunConfig.arrivals with mode "ssd"): both sides refill a row only with a request that has
arrived (the outcome marks the refilled rows), rows without a request idle as finished one-token rows, and
with no row live the verifier sleeps until the next arrival instead of running rounds on idle rows. Every
output is the target's greedy one; no request is admitted, or gets its first token, before it arrives."""

import json

import pytest
from exec_helpers import plain_greedy, tiny_models

from saguaro_exec import RunConfig, run
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3, 9], [30, 4, 4], [5, 6, 7, 8], [9, 9, 9]]


def _ssd(arrivals, batch=2, n_new=10, **extra):
    spec = SpecConfig(mode="ssd", k=3, batch_size=batch, fanout=(2, 1, 1, 1))
    return run(RunConfig(spec=spec, target=TARGET, draft=DRAFT, prompts=PROMPTS, max_new_tokens=n_new,
                         arrivals=arrivals, check_lossless=True, **extra))


def _admitted_after_arrival(rep) -> None:
    """Each request's first round (the one after its refill) starts after it arrived, its first speculation
    is the backup's (a fresh row); 0 < TTFT <= latency; no round runs on idle rows alone."""
    assert not rep.faults, rep.faults   # a fault's fallback rounds carry no backup flags (session 29's CI flake)
    rows, arr, ttft = rep.measurements.rounds, rep.per_request["arrival_s"], rep.per_request["ttft_s"]
    first = [next(r for r in rows if rid in r["seq"]) for rid in range(len(arr))]
    origin = first[0]["t1"] - ttft[0]                                  # request 0's arrival on the rounds' clock
    assert all(r["batch"] >= 1 for r in rows)
    for rid, (a, t, lat) in enumerate(zip(arr, ttft, rep.per_request["latency_s"])):
        assert 0 < t <= lat
        assert first[rid]["from_backup"][first[rid]["seq"].index(rid)]
        assert first[rid]["t0"] >= origin + a - 1e-6, (rid, first[rid]["t0"], origin + a)
        assert first[rid]["t1"] == pytest.approx(origin + a + t)


@pytest.mark.parametrize("protocol,inline", [("reply", False), ("push", False), ("push", True)])
def test_poisson_ssd_load_is_lossless_and_respects_arrivals(protocol, inline):
    rep = _ssd({"qps": 30.0, "seed": 3}, ssd_protocol=protocol, inline_draft=inline)
    assert rep.token_ids == [plain_greedy(TARGET, p, 10) for p in PROMPTS]
    arr = rep.per_request["arrival_s"]
    assert arr == sorted(arr) and arr[-1] > 0.1
    for m in (rep.ttft_s, rep.tpot_s, rep.latency_s):
        assert 0 < m["p50"] <= m["p90"] <= m["p99"]
    assert rep.throughput > 0 and rep.offered_qps == 30.0
    _admitted_after_arrival(rep)
    assert json.loads(json.dumps(rep.summary()))["tpot_s"]["p99"] == rep.tpot_s["p99"]


def test_ssd_trace_idles_between_requests_and_keeps_output_lengths(tmp_path):
    """Two requests at t = 0 (the draft starts exactly those rows of three), then three 0.2 s apart, each
    long after the one before has finished: the verifier sleeps (an ``idle`` event) instead of running rounds
    on idle rows, each late request decodes alone from its own arrival, with the trace's output length."""
    shape = [(0.0, 5, 6), (0.0, 3, 4), (0.3, 8, 7), (0.5, 3, 3), (0.7, 4, 8)]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": a, "prompt_tokens": n, "output_tokens": o}) + "\n"
                             for a, n, o in shape))
    rep = _ssd({"trace": str(trace)}, batch=3)
    prompts = [(PROMPTS[i] * 3)[:n] for i, (_, n, _) in enumerate(shape)]
    assert rep.token_ids == [plain_greedy(TARGET, p, o) for p, (_, _, o) in zip(prompts, shape)]
    assert rep.per_request["arrival_s"] == pytest.approx([a for a, _, _ in shape])
    rows = rep.measurements.rounds
    assert set(rows[0]["seq"]) == {0, 1} and "refill" not in rows[0]
    for rid in (2, 3, 4):
        mine = [r for r in rows if rid in r["seq"]]
        assert all(r["seq"] == [rid] for r in mine)                     # alone in the batch
        assert mine[0]["refill"] == [rid]
        assert rep.per_request["ttft_s"][rid] < 0.1                     # served at its arrival, not a round later
    assert sum(e["name"] == "idle" for e in rep.events) == 3
    _admitted_after_arrival(rep)


def test_draft_mirrors_the_refilled_rows(tmp_path):
    """With the target as its own draft every speculation of a correctly mirrored row is accepted whole, and
    each request's first speculation is a fresh row's backup: a draft that refilled a row before its request
    arrived (the all-at-t=0 rule) fails the second (tested by mutation)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": a, "prompt_tokens": 4, "output_tokens": 9}) + "\n"
                             for a in (0.0, 0.0, 0.01, 0.02, 0.3, 0.31)))
    spec = SpecConfig(mode="ssd", k=3, batch_size=3, fanout=(2, 1, 1, 1))
    rep = run(RunConfig(spec=spec, target=TARGET, draft=TARGET, prompts=PROMPTS, max_new_tokens=9,
                        arrivals={"trace": str(trace)}))
    rows = rep.measurements.rounds
    assert any(r.get("refill") for r in rows[1:])
    assert all(a == 3 for r in rows for a in r["accepted"]), [r["accepted"] for r in rows]
    _admitted_after_arrival(rep)


@pytest.mark.parametrize("fallback", ["sd", "ar"])
def test_draft_fault_under_load_finishes_in_process(fallback, tmp_path):
    """The draft dies mid-run with requests still to arrive: the in-process fallback takes the verifier's
    rows (idle ones included) and its queue with the arrival times, and every output is still greedy."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": a, "prompt_tokens": 4, "output_tokens": 8}) + "\n"
                             for a in (0.0, 0.05, 0.1, 0.3, 0.35, 0.5)))
    rep = _ssd({"trace": str(trace)}, batch=3, n_new=8, inject_fault="die@3", fallback=fallback)
    assert rep.faults and rep.faults[0]["fallback"] == fallback
    assert rep.token_ids == [plain_greedy(TARGET, (p * 2)[:4], 8) for p in PROMPTS]
    for rid, (a, t) in enumerate(zip(rep.per_request["arrival_s"], rep.per_request["ttft_s"])):
        assert t > 0, (rid, a, t)
