"""The executor's per-round loop time outside its rounds: from one round's end to the next one's start, the round's
bookkeeping (its row, trace event, the refill check, the stop check), as the ``loop`` line of ``profile.executor``
(seconds a round against the rows it forwarded). AR and SD only: SSD's verifier stamps its rounds back to back,
so its bookkeeping is inside its rounds already. Gaps before a refill are left out (they hold the prefill and,
under load, the wait for an arrival: charged apart).
"""

from __future__ import annotations

import numpy as np

from calibration.fit_acceptance import RunRounds
from calibration.fit_executor import _line


def loop_gaps(run: RunRounds) -> list[tuple[int, float]]:
    """(rows forwarded, seconds from its end to the next round's start) per round followed by one without a refill."""
    if run.mode == "ssd":
        return []
    out = []
    for a, b in zip(run.rounds, run.rounds[1:]):
        if b.get("refill") or a.get("batch_index", 0) != b.get("batch_index", 0) or a.get("fallback"):
            continue
        gap = float(b.get("t0", 0.0)) - float(a.get("t1", 0.0))
        if gap >= 0:
            out.append((int(a.get("width") or a.get("batch") or 1), gap))
    return out


def fit_loop(runs: list[RunRounds]) -> tuple[dict, dict]:
    """({"loop": [base_s, per_row_s]}, info) from the AR / SD runs' gaps (mean per width; {} when none)."""
    pts = [p for r in runs for p in loop_gaps(r)]
    if not pts:
        return {}, {"n": 0}
    by: dict[int, list[float]] = {}
    for w, g in pts:
        by.setdefault(w, []).append(g)
    xs = np.asarray(sorted(by), float)
    ys = np.asarray([np.mean(by[int(x)]) for x in xs])
    ns = np.asarray([len(by[int(x)]) for x in xs], float)
    line = _line(xs, ys, ns)
    return {"loop": line}, {"n": len(pts), "line": line, "median_s": float(np.median([g for _, g in pts])),
                            "by_width": {str(int(x)): float(y) for x, y in zip(xs, ys)}}
