"""Per-round hand-off times of an SSD run, from its round rows and trace events (all on one clock:
seconds since the run's start, ``time.perf_counter`` = CLOCK_MONOTONIC in both processes).

For round j >= 1, which verifies the speculation looked up (or answered) in cache C_{j-1}:
- ``draft_gap``: the draft's first action on outcome o_{j-1} (its reply on a miss, else the build of C_j)
  minus the later of o_{j-1} known to the verifier (verification j-1's end: packing and the send count
  in the gap) and C_{j-1} built (its packing and send too): the draft-side hand-off.
- ``verifier_gap``: verification j's start minus the later of the verifier's own send of o_{j-1} and the
  speculation being ready (C_{j-1} built, or the draft's reply on a miss): the verifier-side hand-off.
- ``wait``: the verifier's whole wait in round j (a stall when > 1 ms), ``build``: C_{j-1}'s glue..tree, and
  ``build_off_core``: how much of it the draft thread spent off its core (wall minus its CPU time, one-thread
  CPU runs): a stall whose build ran long off core is the host's, one on core is the draft's compute.
Where the run carries explicit message stamps, the transit legs are added. Speculator events of round j
describe C_{j-1}: its build, ``cache_sent`` (packing until the send) and ``outcome_seen`` (waiting for
o_{j-2}, the outcome it started from, until seen); the verifier's ``cache_seen`` of round j ends when
C_{j-1} was in hand. The transit legs count from the later of "sent" and "the receiver started waiting"
(a message that waits for a busy receiver is not in transit): ``outcome_transit`` = o_{j-1} seen minus
max(known, the draft's wait start), ``draft_lag`` = the draft's first action minus seen, ``cache_transit``
= C_{j-1} seen minus max(sent, the verifier's wait start), ``verify_lag`` = verification start minus seen.
``_decomposition`` splits these further (outcome send / wake-up; the draft's unpack, answer on a hit or a
miss, settle and pack), so what remains of a hand-off can be named.
"""

from __future__ import annotations

import math

from calibration.fit_executor import lost_core

STALL_S = 1e-3
METRICS = ("draft_gap", "verifier_gap", "wait", "build", "build_off_core", "verify", "outcome_transit", "draft_lag",
           "cache_transit", "verify_lag", "outcome_send", "outcome_wake", "unpack", "answer_hit", "answer_miss",
           "settle", "pack")


def split_batches(rows: list[dict]) -> list[list[dict]]:
    """Round rows grouped by batch (each batch's rounds count from 0)."""
    out: list[list[dict]] = []
    for r in rows:
        if r["round"] == 0 or not out:
            out.append([])
        out[-1].append(r)
    return out


def events_by_batch(events: list[dict], track: str) -> list[dict[int, dict[str, tuple]]]:
    """Per batch, ``track``'s events by round, name -> (start, end). Every batch has round-0 events (the
    draft's first speculation; the verifier's first wait), so a round-0 name seen again starts the next
    batch. (Time order alone does not split them: a stamp such as ``outcome_seen`` starts before the
    previous round's reply, and a draft may start batch b + 1 before the verifier has left batch b.)"""
    out: list[dict[int, dict[str, tuple]]] = [{}]
    for e in sorted((e for e in events if e["track"] == track and "round" in e["args"]), key=lambda e: e["start_s"]):
        r = e["args"]["round"]
        if r == 0 and e["name"] in out[-1].get(0, {}):
            out.append({})
        out[-1].setdefault(r, {})[e["name"]] = (e["start_s"], e["start_s"] + e["dur_s"])
    return out


def round_handoffs(rows: list[dict], spec: dict, ver: dict) -> list[dict]:
    """Hand-off times (seconds) of every round j >= 1 of one batch (see the module note) from its rows
    and its speculator and verifier events by round."""
    out = []
    for j in range(1, len(rows)):
        prev, cur, ev, nxt = rows[j - 1], rows[j], spec.get(j, {}), spec.get(j + 1, {})
        if "tree" not in ev:
            continue
        built = ev["tree"][1]
        replied = "reply" in ev
        ready = ev["reply"][1] if replied else built
        posted = prev["t0"] + prev["wait_s"] + prev["verify_s"]   # o_{j-1} known (its send follows: the
        # draft may see it before the verifier's send call returns on a busy machine)
        start = cur["t0"] + cur["wait_s"]
        first = ev["reply"][0] if replied else nxt.get("glue", (math.nan,))[0]
        rec = {"round": j, "miss": replied, "wait": cur["wait_s"], "verify": prev["verify_s"],
               "build": built - ev["glue"][0], "draft_gap": first - max(posted, built),
               "verifier_gap": start - max(prev["t1"], ready)}
        if "build_cpu_s" in prev:                 # C_{j-1}'s build ran during round j-1: its row has its CPU time
            rec["build_off_core"] = max(0.0, rec["build"] - prev["build_cpu_s"])
        if "outcome_seen" in nxt:                 # stamped with the build that started from o_{j-1}
            waited, seen = nxt["outcome_seen"]
            rec["outcome_transit"] = seen - max(posted, waited)
            rec["draft_lag"] = first - seen
        rec.update(_decomposition(prev, ev, nxt, replied))
        if "cache_sent" in ev and "cache_seen" in ver.get(j, {}):
            waited, seen = ver[j]["cache_seen"]
            rec["cache_transit"] = seen - max(ev["cache_sent"][1], waited)
            rec["verify_lag"] = start - seen
        out.append(rec)
    return out


def _decomposition(prev: dict, ev: dict, nxt: dict, miss: bool) -> dict:
    """The legs inside the hand-offs, where the run stamped them (push protocol): ``outcome_send`` (the
    verifier's packing and send of o_{j-1}), ``outcome_wake`` (o_{j-1} seen minus the later of that send's
    end and the draft's wait start), ``unpack`` (seen until the draft's answer starts), ``answer_hit`` /
    ``answer_miss`` (the draft's answer to o_{j-1}: lookup, and on a miss the backup), ``settle`` and
    ``pack`` (C_{j-1}'s build: applying o_{j-2}; the tree's host copy, packing and lookup table)."""
    out = {"outcome_send": prev.get("msg_s", math.nan)}
    if "outcome_seen" in nxt:
        waited, seen = nxt["outcome_seen"]
        out["outcome_wake"] = seen - max(prev["t1"], waited)
        if "answer" in nxt:
            out["unpack"] = nxt["answer"][0] - seen
    if "answer" in nxt:
        out["answer_miss" if miss else "answer_hit"] = nxt["answer"][1] - nxt["answer"][0]
    for name in ("settle", "pack"):
        if name in ev:
            out[name] = ev[name][1] - ev[name][0]
    return out


def run_handoffs(rows: list[dict], events: list[dict]) -> list[dict]:
    """``round_handoffs`` of every batch of a run."""
    batches = split_batches(rows)
    spec, ver = events_by_batch(events, "speculator"), events_by_batch(events, "verifier")
    if not (len(batches) == len(spec) == len(ver)):
        raise ValueError(f"{len(batches)} batches of rounds but {len(spec)} of draft and {len(ver)} of "
                         "verifier events")
    return [h for b, s, v in zip(batches, spec, ver) for h in round_handoffs(b, s, v)]


def quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of a non-empty list."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def distribution(xs: list[float]) -> dict | None:
    """p50/p90/p99/mean/max in ms and the share above 1 ms, of the finite values."""
    xs = [x for x in xs if math.isfinite(x)]
    if not xs:
        return None
    ms = [1e3 * x for x in xs]
    return {"n": len(xs), "p50_ms": quantile(ms, 0.5), "p90_ms": quantile(ms, 0.9), "p99_ms": quantile(ms, 0.99),
            "mean_ms": sum(ms) / len(ms), "max_ms": max(ms), "share_over_1ms": sum(x > STALL_S for x in xs) / len(xs)}


def stalls(handoffs: list[dict]) -> dict:
    """Share of rounds whose wait exceeds 1 ms: all, those that verified a cached speculation (a stall there
    is a hand-off's), and those that verified the backup's (a miss: the verifier waits for the backup by
    design, about K draft steps with the neural one), with each kind's count."""
    def share(hs: list[dict]) -> float | None:
        return sum(h["wait"] > STALL_S for h in hs) / len(hs) if hs else None
    hit = [h for h in handoffs if not h["miss"]]
    miss = [h for h in handoffs if h["miss"]]
    out = {"all": share(handoffs), "hit_rounds": share(hit), "miss_rounds": share(miss), "n_hit": len(hit),
           "n_miss": len(miss)}
    stalled = [h for h in hit if h["wait"] > STALL_S and "build_off_core" in h]
    if stalled:     # the draft lost its core during the build, by the executor fit's preemption rule
        out["hit_stalls_draft_off_core"] = sum(lost_core(h["build"], h["build_off_core"]) for h in stalled)
        out["hit_stalls_timed"] = len(stalled)
    return out


def summarize(handoffs: list[dict]) -> dict:
    """Distribution of every metric present, plus the miss share and the stalls by round kind."""
    out = {m: distribution([h[m] for h in handoffs if m in h]) for m in METRICS}
    out = {m: d for m, d in out.items() if d is not None}
    out["rounds"] = len(handoffs)
    out["miss_share"] = sum(h["miss"] for h in handoffs) / len(handoffs) if handoffs else None
    out["stalled"] = stalls(handoffs)
    return out
