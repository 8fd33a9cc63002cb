"""The slower rounds after a replica sat idle, from load-mode runs (profile.executor.after_idle).

Why: in load-mode runs on the 2-vCPU VM (2026-12-02, AR on the tiny pair at a light load, 3 runs of 96 requests)
the first decode round after an idle gap of 2 ms or more took 1.55x a steady round of the same width, the next
ones 1.33x, 1.21x, 1.07x, 1.10x, and from about the 6th round on 1.0x; after gaps under 2 ms the first round took
1.19x (SD's and SSD's rounds, 3x as long, came back within 2% in bench_load's fits). The core, its caches and the sleeping process
come back cold, an effect fixed-batch runs never show and the round costs (fitted on them) leave out; at a light
load, where most requests start after a gap, it made every mode's rounds ~10-20% slower than those costs and the
predicted TPOT that much too fast. The fit is relative to the run's own steady rounds of the same width (as the
speed drift's is), so it carries neither the machine's speed of the day nor the profile's costs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from calibration.overheads import IDLE_GAP_S

STEADY_FROM = 8      # rounds after an idle gap from which a round counts as steady (the excess is gone by ~6)
MAX_ROUNDS = 8       # positions fitted after a gap
MIN_SAMPLES = 5      # busy stretches a position needs to be fitted
MIN_EXCESS = 0.02    # positions from the first one below this on are left out (noise, not a cold start)


def _positions(rounds: Sequence[dict]) -> list[tuple[int | None, int, float]]:
    """(position after the last idle gap or None before the first one, width, seconds) of every round of a run:
    a round starts a busy stretch when no row of the round before it is in it and the time between them, less
    the prefill that admitted its rows, is at least IDLE_GAP_S."""
    out, prev, pos = [], None, None
    for r in rounds:
        t = float(r["t1"]) - float(r["t0"])
        width = int(r.get("width") or r.get("batch") or 1)
        if prev is not None and not set(prev.get("seq") or ()) & set(r.get("seq") or ()):
            gap = float(r["t0"]) - float(prev["t1"]) - float(r.get("prefill_s") or 0.0)
            if gap >= IDLE_GAP_S:
                pos = -1
        pos = None if pos is None else pos + 1
        out.append((pos, width, t))
        prev = r
    return out


def after_idle(runs: Sequence[Sequence[dict]]) -> tuple[list[float], dict]:
    """(extra shares, info): per position after an idle gap (0 = the first round), the median over busy
    stretches of the round's time over the median steady round (position >= STEADY_FROM, or before the run's
    first gap) of the same width and run, less 1; cut at the first position with fewer than MIN_SAMPLES stretches
    or an excess below MIN_EXCESS, negatives never kept. Empty when no run has a gap and steady rounds."""
    ratios: list[list[float]] = [[] for _ in range(MAX_ROUNDS)]
    gaps = 0
    for rounds in runs:
        rows = _positions(rounds)
        steady: dict[int, list[float]] = {}
        for pos, w, t in rows:
            if pos is None or pos >= STEADY_FROM:
                steady.setdefault(w, []).append(t)
        med = {w: float(np.median(v)) for w, v in steady.items() if len(v) >= MIN_SAMPLES}
        for pos, w, t in rows:
            gaps += pos == 0
            if pos is not None and pos < MAX_ROUNDS and w in med and med[w] > 0:
                ratios[pos].append(t / med[w])
    excess: list[float] = []
    for vals in ratios:
        if len(vals) < MIN_SAMPLES:
            break
        e = float(np.median(vals)) - 1.0
        if e < MIN_EXCESS:
            break
        excess.append(round(e, 4))
    return excess, {"idle_gaps": gaps, "min_gap_s": IDLE_GAP_S, "steady_from": STEADY_FROM,
                    "samples": [len(v) for v in ratios], "median_ratio": [float(np.median(v)) if v else None
                                                                         for v in ratios]}
