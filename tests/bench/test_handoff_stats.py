"""bench_handoff's per-round hand-off derivation on a hand-made push-protocol timeline (pure helpers)."""

from __future__ import annotations

import math

import pytest

from bench.handoff_stats import distribution, quantile, run_handoffs, split_batches, stalls, summarize

MS = 1e-3


def _row(r: int, t0: float, wait: float, verify: float, msg: float) -> dict:
    return {"round": r, "t0": t0 * MS, "t1": (t0 + wait + verify + msg) * MS, "wait_s": wait * MS,
            "verify_s": verify * MS, "msg_s": msg * MS}


def _ev(name: str, track: str, start: float, end: float, r: int | None = None) -> dict:
    return {"name": name, "track": track, "start_s": start * MS, "dur_s": (end - start) * MS,
            "args": {} if r is None else {"round": r}}


def _batch(base: float, start: float | None = None) -> tuple[list[dict], list[dict]]:
    """Three rounds (times in ms from ``base``): verify 2 ms, send 0.1 ms; the draft's builds take 1 ms
    and start 0.3 ms after each outcome is known; round 2 misses (the draft's reply 0.5 ms). The draft's
    first speculation (round 0) at ``start`` (default: during the prefill)."""
    start = base - 0.5 if start is None else start
    rows = [_row(0, base + 0, 1.0, 2.0, 0.1), _row(1, base + 3.1, 0.2, 2.0, 0.1), _row(2, base + 5.4, 0.9, 2.0, 0.1)]
    ev = [_ev("prefill", "verifier", base - 1, base), _ev("reply", "speculator", start, start + 0.4, 0),
          _ev("backup", "speculator", start, start + 0.4, 0),
          # C_0 (tagged round 1), built during verification 0
          _ev("glue", "speculator", base + 1.2, base + 1.5, 1), _ev("tree", "speculator", base + 1.6, base + 2.2, 1),
          # C_1 (round 2) starts 0.3 ms after o_0 is known at base + 3.0
          _ev("glue", "speculator", base + 3.3, base + 3.6, 2), _ev("tree", "speculator", base + 3.7, base + 4.3, 2),
          # o_1 known at base + 5.3: C_1 missed it, the draft replies from base + 5.5 to 6.2
          _ev("reply", "speculator", base + 5.5, base + 6.2, 2), _ev("backup", "speculator", base + 5.5, base + 6.2, 2),
          _ev("glue", "speculator", base + 6.4, base + 6.7, 3), _ev("tree", "speculator", base + 6.8, base + 7.4, 3)]
    for r in rows:                                     # the verifier's own phases, as run_ssd records them
        t0, t1 = r["t0"] / MS, (r["t0"] + r["wait_s"]) / MS
        t2 = t1 + r["verify_s"] / MS
        ev += [_ev("wait", "verifier", t0, t1, r["round"]), _ev("verify", "verifier", t1, t2, r["round"]),
               _ev("send", "verifier", t2, r["t1"] / MS, r["round"])]
    return rows, ev


def test_gaps_per_round_across_batches():
    r1, e1 = _batch(0.0)
    r2, e2 = _batch(100.0)
    hand = run_handoffs(r1 + r2, e1 + e2)
    assert [h["round"] for h in hand] == [1, 2, 1, 2]
    assert len(split_batches(r1 + r2)) == 2
    for h in hand:
        if h["round"] == 1:
            # o_0 known at 3.0, C_0 built at 2.2 -> C_1 starts at 3.3; verify 1 starts at 3.3 after its
            # own send ended at 3.1 (C_0 ready long before)
            assert h["draft_gap"] == pytest.approx(0.3 * MS) and h["verifier_gap"] == pytest.approx(0.2 * MS)
            assert not h["miss"] and h["build"] == pytest.approx(1.0 * MS)
        else:
            # o_1 known at 5.3, C_1 built at 4.3 -> the reply starts at 5.5; verify 2 starts at 6.3,
            # 0.1 ms after the reply ended at 6.2
            assert h["draft_gap"] == pytest.approx(0.2 * MS) and h["verifier_gap"] == pytest.approx(0.1 * MS)
            assert h["miss"] and h["wait"] == pytest.approx(0.9 * MS)
    s = summarize(hand)
    assert s["rounds"] == 4 and s["miss_share"] == 0.5
    assert s["wait"]["share_over_1ms"] == 0 and s["draft_gap"]["p50_ms"] == pytest.approx(0.25)
    assert s["stalled"] == {"all": 0.0, "hit_rounds": 0.0, "miss_rounds": 0.0, "n_hit": 2, "n_miss": 2}
    # the draft starts batch 2 (its round 0 reply) before the verifier's batch 1 bookkeeping is over
    r2b, e2b = _batch(10.0, start=7.5)
    assert run_handoffs(r1 + r2b, e1 + e2b)[:2] == run_handoffs(r1, e1)
    with pytest.raises(ValueError, match="2 batches of rounds but 1 of draft"):
        run_handoffs(r1 + r2, e1)


def test_explicit_message_stamps_give_transit_legs():
    rows, ev = _batch(0.0)
    ev += [_ev("outcome_seen", "speculator", 2.3, 3.1, 2), _ev("cache_sent", "speculator", 2.2, 2.25, 1),
           _ev("cache_seen", "verifier", 3.1, 3.2, 1),
           _ev("outcome_seen", "speculator", 4.4, 5.35, 3)]      # starts before round 2's reply: still batch 0
    h, h2 = run_handoffs(rows, ev)
    # o_0 known at 3.0, seen at 3.1 (stamped with C_1's build, round 2); C_1 starts at 3.3
    assert h["outcome_transit"] == pytest.approx(0.1 * MS) and h["draft_lag"] == pytest.approx(0.2 * MS)
    # C_0 sent at 2.25 while the verifier verified; it began waiting at 3.1 and had it at 3.2
    assert h["cache_transit"] == pytest.approx(0.1 * MS) and h["verify_lag"] == pytest.approx(0.1 * MS)
    assert h2["outcome_transit"] == pytest.approx(0.05 * MS) and "cache_transit" not in h2


def test_distribution_quantiles_and_stall_share():
    xs = [i * 0.1 * MS for i in range(1, 21)]          # 0.1 .. 2.0 ms
    d = distribution(xs + [math.nan])
    assert d["n"] == 20 and d["p50_ms"] == pytest.approx(1.05) and d["max_ms"] == pytest.approx(2.0)
    assert d["share_over_1ms"] == pytest.approx(0.5) and quantile([3.0], 0.99) == 3.0
    assert distribution([math.nan]) is None


def test_stamps_split_the_hand_off_into_named_legs():
    rows, ev = _batch(0.0)
    # o_0 known at 3.0, sent by 3.1; the draft waited from 2.3, saw it at 3.15, answered 3.17-3.2 (a hit),
    # and C_1's build (round 2's events) settled 3.3-3.32; C_0's pack took 2.1-2.2
    ev += [_ev("outcome_seen", "speculator", 2.3, 3.15, 2), _ev("answer", "speculator", 3.17, 3.2, 2),
           _ev("settle", "speculator", 3.3, 3.32, 2), _ev("pack", "speculator", 2.1, 2.2, 1),
           # o_1 (known 5.3, sent by 5.4) missed: seen at 5.45, answered 5.5-6.2
           _ev("outcome_seen", "speculator", 4.4, 5.45, 3), _ev("answer", "speculator", 5.5, 6.2, 3)]
    h, h2 = run_handoffs(rows, ev)
    assert h["outcome_send"] == pytest.approx(0.1 * MS) and h["outcome_wake"] == pytest.approx(0.05 * MS)
    assert h["unpack"] == pytest.approx(0.02 * MS) and h["answer_hit"] == pytest.approx(0.03 * MS)
    assert h["pack"] == pytest.approx(0.1 * MS) and "answer_miss" not in h and "settle" not in h
    assert h2["answer_miss"] == pytest.approx(0.7 * MS) and h2["settle"] == pytest.approx(0.02 * MS)
    s = summarize([h, h2])
    assert s["answer_hit"]["n"] == 1 and s["answer_miss"]["n"] == 1 and s["outcome_wake"]["n"] == 2


def test_stalls_are_told_apart_by_round_kind():
    def h(miss: bool, wait_ms: float) -> dict:
        return {"miss": miss, "wait": wait_ms * MS}
    hand = [h(False, 0.1)] * 8 + [h(False, 1.5)] * 2 + [h(True, 1.2)] * 3 + [h(True, 0.4)]
    s = stalls(hand)
    assert s["all"] == pytest.approx(5 / 14) and s["hit_rounds"] == pytest.approx(0.2)
    assert s["miss_rounds"] == pytest.approx(0.75) and (s["n_hit"], s["n_miss"]) == (10, 4)
    assert stalls([h(True, 2.0)])["hit_rounds"] is None


def test_stalled_builds_off_core_are_counted_apart():
    """A stalled hit round whose build the draft spent partly off its core (wall minus its CPU time above the
    executor fit's preemption rule: 20%, 0.2 ms at least) is the host's; one on core is the draft's compute."""
    rows, ev = _batch(0.0)
    rows[0]["build_cpu_s"] = 0.95 * MS      # C_0's build (1 ms) on core: 0.05 ms off, within the rule
    hand = run_handoffs(rows, ev)
    assert hand[0]["build_off_core"] == pytest.approx(0.05 * MS) and "build_off_core" not in hand[1]

    def h(wait_ms: float, build_ms: float, cpu_ms: float) -> dict:
        return {"miss": False, "wait": wait_ms * MS, "build": build_ms * MS, "build_off_core": (build_ms - cpu_ms) * MS}
    s = stalls([h(1.5, 5.0, 4.9), h(2.0, 6.0, 3.0), h(1.2, 4.0, 3.7), h(0.2, 3.0, 1.0)])
    assert (s["hit_stalls_draft_off_core"], s["hit_stalls_timed"]) == (1, 3)   # the unstalled round is not counted
    assert "hit_stalls_timed" not in stalls([{"miss": False, "wait": 2 * MS}])
