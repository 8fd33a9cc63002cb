"""Continuous batching at the row level: between rounds, finished rows take the next arrived requests.

Why here and not in each engine: AR, SD and the fallbacks share it. ``BatchState.refill`` decides which
request takes which slot and which rows move; each side holding per-row state (the Verifier's target
cache, the Drafter's draft cache) applies the same moves and prefills the admitted prompts but their last
token into their own cache rows, while the other rows keep their contexts. With arrivals (load mode) a
batch with no live row waits on the wall clock for the next request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from saguaro_exec.engine.rounds import event
from saguaro_exec.engine.state import BatchState


def remap(values: list, moves: list[tuple[int, int]], width: int, n: int, fill: object) -> list:
    """Per-row ``values`` after ``BatchState.refill``'s moves: padded to ``width``, moved, cut to ``n``."""
    out = list(values) + [fill] * (width - len(values))
    for src, dst in moves:
        out[dst] = out[src]
    return out[:n]


def refill(state: BatchState, sides: Sequence, now: Callable[[], float], r: int) -> tuple[dict, list[dict]]:
    """Admit arrived requests into finished or free slots on every side (``apply_refill(moves, admitted)``),
    waiting for an arrival while no row is live. Returns the extra keys of the next round row (``refill``:
    admitted request ids, ``prefill_s``) and the trace events."""
    if not state.needs_refill(now()):          # most rounds: every row still live, nobody waiting for a free slot
        return {}, []
    movable = all(s.runner.movable for s in sides)
    rids: list[int] = []
    extra: dict = {}
    events: list[dict] = []
    prefill_s = 0.0
    while True:
        t0, rows = now(), len(state)
        moves, admitted = state.refill(t0, movable)
        if moves or admitted or len(state) != rows:          # finished last rows may just be dropped
            for side in sides:
                side.apply_refill(moves, admitted)
            t1 = now()
            prefill_s += t1 - t0
            new = [state.slots[b].rid for b in admitted]
            rids += new
            if admitted:
                events.append(event("prefill", "verifier", t0, t1, round=r, requests=new))
        nxt = state.next_arrival()
        if state.live() or nxt is None:
            break
        time.sleep(max(0.0, nxt - now()))         # idle: no row live until the next request arrives
    if rids:
        extra = {"refill": rids, "prefill_s": prefill_s}
    return extra, events
