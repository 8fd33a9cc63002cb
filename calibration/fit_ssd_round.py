"""SSD's terms beyond the forwards, from real runs' rounds: the draft's own per-round time (median, a line in
the batch width and q rows where the runs span several, + stall tail), the (verification, build) jitter of single
rounds, the effective one-way message time and the verifier's receive + lookup of a pushed cache."""

from __future__ import annotations

import numpy as np

from calibration.fit_acceptance import RunRounds, steady_rounds
from calibration.fit_executor import _g, forward_widths, tree_width

STALL_MIN_S = 5e-4   # a draft round this much (and 2x its median) above the median counts as a stall


def _own_from_stamps(run: RunRounds) -> list[float] | None:
    """The draft's own time per push round from its hand-off stamps (None when the run has none): its busy
    span between two outcomes (outcome in hand -> waiting for the next) less the build's forwards (settle
    .. pack, which glue / fork / tree cover), the backup that answered the first outcome, and the cache's
    send as the simulator charges it apart (the round's outcome send, the same link). Rounds next to a
    refill are left out (the draft restarts refilled rows inside its answer; the verifier's prefill is
    outside its rounds). Each difference is taken on the draft's own clock, so it is aligned: the older
    estimate (round span less that round's forwards, in rounds the draft bound) paired a span with the
    forwards of the next build and came out 0.5 ms too high at batch 1 (mean 0.59 vs 0.17 ms)."""
    rows = steady_rounds(run)
    width = forward_widths(run)
    out, stamped = [], False
    for prev, a, b in zip(rows, rows[1:], rows[2:]):
        ha, hb = a.get("handoff") or {}, b.get("handoff") or {}
        if not all(k in ha for k in ("outcome_seen", "settle", "pack")) or "outcome_seen" not in hb:
            continue
        stamped = True
        if len({r.get("batch_index", 0) for r in (prev, a, b)}) > 1 or any("refill" in r for r in (prev, a, b)):
            continue
        busy = hb["outcome_seen"][0] - ha["outcome_seen"][1]
        forwards = ha["pack"][1] - ha["settle"][0]
        own = max(0.0, busy - forwards - _g(prev, "backup_s") - _g(a, "msg_s"))
        out.append((own, width(a), q_rows(run, a, width(a))))
    return out if stamped else None


def q_rows(run: RunRounds, row: dict, width: int) -> int:
    """Draft distribution rows the round's pushed cache carries (width x branches x K at T > 0, none at T = 0):
    the draft copies them into the message and sends them, beyond its forwards."""
    return width * tree_width(run, row) * run.k if run.temperature > 0 else 0


def _own_from_spans(run: RunRounds) -> list[tuple[float, int, int]]:
    """Older runs (no stamps): round span less forwards, backup and the outcome send, in rounds the draft bound."""
    over, width = [], forward_widths(run)
    for row in steady_rounds(run):
        work = sum(_g(row, k) for k in ("glue_s", "fork_s", "tree_s", "backup_s"))
        span = _g(row, "t1") - _g(row, "t0")
        if work > _g(row, "verify_s") + _g(row, "msg_s") and _g(row, "verify_s") > 0 and span > 0:
            b = width(row)   # the cache's send is modelled apart
            over.append((max(0.0, span - work - _g(row, "msg_s")), b, q_rows(run, row, b)))
    return over


def _median_line(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients of the least-absolute-deviation (conditional median) line y ~ x, by
    iteratively reweighted least squares."""
    from scipy.optimize import lsq_linear
    coef = lsq_linear(x, y, bounds=(0.0, np.inf)).x
    for _ in range(30):
        w = 1.0 / np.sqrt(np.maximum(np.abs(y - x @ coef), 1e-6))
        coef = lsq_linear(x * w[:, None], y * w, bounds=(0.0, np.inf)).x
    return coef


def draft_round(runs: list[RunRounds]) -> tuple[dict, dict]:
    """The draft's own time per SSD round beyond glue + fork + tree + backup, from push-protocol runs (reply
    rounds cannot tell it from message time): from the draft's hand-off stamps where the runs carry them
    (``_own_from_stamps``), else from rounds the draft bound (``_own_from_spans``). Median, and the stall
    tail (rounds over max(2 x median, median + STALL_MIN_S)): its share and mean excess. Where the runs span
    several batch widths or q-row counts, the median is a line in them (``per_row_s`` per forwarded row,
    ``per_q_row_s`` per draft distribution row the pushed cache carries at T > 0: the draft takes and
    settles every row and copies the q rows into the message; 0.05 ms at width 1, T = 0, 0.3-0.45 ms at
    width 4, T = 0.7 on the tiny pair), the stall tail measured over it."""
    over, source = [], set()
    for run in runs:
        if run.mode != "ssd" or run.protocol != "push":
            continue
        own = _own_from_stamps(run)
        source.add("stamps" if own is not None else "spans")
        over += own if own is not None else _own_from_spans(run)
    if not over:
        return {}, {"n": 0}
    o, w, q = (np.asarray(v, float) for v in zip(*over))
    cols = {name: v for name, v in (("per_row_s", w), ("per_q_row_s", q)) if np.unique(v).size > 1}
    med = np.full_like(o, float(np.median(o)))
    d: dict = {"median_s": float(med[0])}
    if cols:
        base = o <= np.maximum(2 * med, med + STALL_MIN_S)     # fit the line to the rounds without a stall
        x = np.column_stack([np.ones_like(o), *cols.values()])
        coef = _median_line(x[base], o[base])
        med = x @ coef
        d = {"median_s": float(coef[0]), **{name: float(c) for name, c in zip(cols, coef[1:])}}
    tail = o > np.maximum(2 * med, med + STALL_MIN_S)
    d.update({"stall_s": float((o - med)[tail].mean()) if tail.any() else 0.0,
              "stall_frac": float(tail.mean())})
    return d, {"n": int(o.size), **d, "mean_s": float(o.mean()), "from": sorted(source)}


JITTER_WINDOW = 9      # rounds of the centred running mean a round's time is divided by (slow drift left out)
JITTER_PAIRS = 200     # pairs kept in the profile


def _ratios(x: np.ndarray) -> np.ndarray:
    """Each value over the centred running mean of JITTER_WINDOW rounds around it."""
    k = min(JITTER_WINDOW, len(x))
    run = np.convolve(x, np.ones(k) / k, mode="same") * k / np.convolve(np.ones(len(x)), np.ones(k), mode="same")
    return x / run


def round_jitter(runs: list[RunRounds]) -> tuple[list[list[float]], dict]:
    """(verify, build) multipliers of single SSD rounds: each round's verification and its concurrent cache
    build (glue + fork + tree of the same row) over their running means, pooled over runs, scaled to mean 1
    and subsampled (fixed seed) to JITTER_PAIRS pairs. Pairs keep the two sides' correlation (on one shared
    CPU both slow down together)."""
    pairs = []
    for run in runs:
        if run.mode != "ssd":
            continue
        rows = [r for r in steady_rounds(run) if _g(r, "verify_s") > 0 and _g(r, "tree_s") > 0]
        if len(rows) < JITTER_WINDOW:
            continue
        v = np.asarray([_g(r, "verify_s") for r in rows])
        b = np.asarray([sum(_g(r, k) for k in ("glue_s", "fork_s", "tree_s")) for r in rows])
        pairs += list(zip(_ratios(v), _ratios(b)))
    if not pairs:
        return [], {"n": 0}
    p = np.asarray(pairs)
    p = p / p.mean(axis=0)
    keep = np.random.default_rng(0).choice(len(p), size=min(JITTER_PAIRS, len(p)), replace=False)
    kept = p[np.sort(keep)]
    kept = kept / kept.mean(axis=0)
    return [[round(float(a), 4), round(float(c), 4)] for a, c in kept], {
        "n": len(p), "std": [float(x) for x in p.std(axis=0)], "corr": float(np.corrcoef(p.T)[0, 1]) if p.std(axis=0).min() > 0 else None,
        "window": JITTER_WINDOW}


def effective_link_s(runs: list[RunRounds], link_s: float = 0.0, draft_round_s: float = 0.0
                     ) -> tuple[float | None, dict]:
    """One-way message time m >= link_s (the microbenchmarked one). Reply runs: the m that makes the model's
    round, mean(max(verify + m, build + draft round) + m) + mean(backup), match the measured mean round (by
    bisection). Push runs (none of reply): the median outcome send (msg_s), the verifier's own send."""
    reply = [r for r in runs if r.mode == "ssd" and r.protocol != "push"]
    push = [r for r in runs if r.mode == "ssd" and r.protocol == "push"]
    if not reply:
        sends = [_g(row, "msg_s") for r in push for row in steady_rounds(r) if _g(row, "msg_s") > 0]
        if not sends:
            return None, {"n": 0}
        m = max(float(link_s), float(np.median(sends)))
        return m, {"n": len(sends), "one_way_s": m, "from": "push runs: median outcome send"}
    obs = []
    for run in reply:
        for r in steady_rounds(run):
            if _g(r, "verify_s") > 0 and r.get("t1") is not None and r.get("t0") is not None:
                build = sum(_g(r, k) for k in ("glue_s", "fork_s", "tree_s")) + draft_round_s
                obs.append((_g(r, "t1") - _g(r, "t0"), _g(r, "verify_s"), build, _g(r, "backup_s")))
    if not obs:
        return None, {"n": 0}
    t, v, build, bk = (np.asarray(x) for x in zip(*obs))
    goal = float(t.mean())

    def period(m: float) -> float:
        return float((np.maximum(v + m, build) + m).mean() + bk.mean())

    lo, hi = float(link_s), max(goal, float(link_s))
    if period(lo) < goal:
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if period(mid) < goal else (lo, mid)
    return lo, {"n": len(obs), "one_way_s": lo, "mean_round_s": goal, "mean_verify_s": float(v.mean()),
                "mean_build_s": float(build.mean()), "build_bound_share": float(np.mean(build > v + lo)),
                "from": "reply runs: mean round"}


def verifier_lookup_s(runs: list[RunRounds]) -> tuple[float, dict]:
    """Push protocol: the verifier's own time receiving a pushed cache and looking the outcome up, the median
    wait of hit rounds the verification clearly bound (draft forwards under 70% of it, so the cache had
    arrived and the wait is the verifier's own work); 0 when no round was verify-bound."""
    waits = [_g(row, "wait_s") for run in runs if run.mode == "ssd" and run.protocol == "push"
             for row in steady_rounds(run) if _g(row, "verify_s") > 0 and not any(row.get("from_backup") or [])
             and sum(_g(row, k) for k in ("glue_s", "fork_s", "tree_s")) < 0.7 * _g(row, "verify_s")]
    if not waits:
        return 0.0, {"n": 0}
    return float(np.median(waits)), {"n": len(waits), "median_s": float(np.median(waits)),
                                     "mean_s": float(np.mean(waits))}
