"""Executor costs from real runs' rounds: overheads per kind of forward (beyond the microbenchmarks), the
draft's own per-round time in SSD (median, a line in the batch width and q rows where the runs span several,
+ stall tail), and the effective one-way message time.

Every forward is costed at the batch width the executor ran it (``forward_widths``: recorded per round; SSD's
finished rows ride along once the queue is empty, AR and SD forward only their live rows), per kind: verify
(target, K+1), ar_step (target, 1), draft_step (SD: (round - verify) / K), glue (draft, K+1), fork (no
microbenchmark: all overhead), tree_step (draft, the round's tree width: the larger schedule total over its rows,
primary or after-miss), backup_step (neural backup / K). Greedy (T = 0) and sampled (T > 0) runs are fitted apart,
and the sigma_{F,C}-sampled kinds of runs at C < 1 apart again (``sampled_c``: the sampled line plus their mean
extra, since the Saguaro sampler adds a top-F, a scatter and a rescale to every sampled row).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from calibration.fit_acceptance import RunRounds, steady_rounds
from calibration.fit_plane import fit_plane, loops_told_apart
from calibration.latency import LatencyModel
from calibration.overheads import _DRAFT_KINDS, KINDS, LOOP_KINDS, REGIMES, SIGMA_KINDS, ExecutorCosts, plane

STALL_MIN_S = 5e-4   # a draft round this much (and 2x its median) above the median counts as a stall


def _g(row: dict, key: str) -> float:
    return float(row.get(key) or 0.0)


def _ctx(row: dict) -> float:
    c = row.get("context", 0)
    return float(np.mean(c)) if isinstance(c, list | tuple) and c else float(c or 0)


def batch_widths(run: RunRounds) -> dict[int, int]:
    """Rows each forward of a batch ran: the batch's largest live count (its first round's)."""
    out: dict[int, int] = {}
    for row in run.rounds:
        b = row.get("batch_index", 0)
        out[b] = max(out.get(b, 0), int(row.get("batch", 1)))
    return out


def forward_widths(run: RunRounds) -> Callable[[dict], int]:
    """width(row): the rows that round's forwards ran. The executor records it (``width``); older runs: the
    live count where AR / SD refill at the row level (their rounds carry ``refill``: finished rows are closed,
    so only live rows are forwarded), else the batch's largest live count (finished rows rode along, as they
    still do in SSD once the queue is empty)."""
    widths = batch_widths(run)
    compacts = run.mode != "ssd" and any("refill" in r for r in run.rounds)

    def width(row: dict) -> int:
        if row.get("width"):
            return int(row["width"])
        live = int(row.get("batch", 1))
        return live if compacts else widths.get(row.get("batch_index", 0), live)

    return width


def tree_width(run: RunRounds, row: dict) -> int:
    """Branches the round's tree held: the larger of its rows' schedule totals (after-miss for rows whose
    speculation came from the backup); the budget when the run records no schedules."""
    prim = sum(run.fanout) if run.fanout else (run.budget or 0)
    miss = sum(run.fanout_miss) if run.fanout_miss else prim
    fb = row.get("from_backup") or [False]
    return max(1, max(miss if f else prim for f in fb))


def kind_rows(runs: list[RunRounds]) -> dict[tuple[str, str], list[tuple[int, int, float, float, int]]]:
    """{(regime, kind): [(width, new_tokens, context, seconds, steps)]} from steady rounds (regime "sampled_c":
    the SIGMA_KINDS of runs at T > 0 with C < 1; steps: the K of a LOOP_KINDS forward's loop, else 0)."""
    out: dict[tuple[str, str], list] = {}
    sigma = False

    def add(regime: str, kind: str, *v: float) -> None:
        regime = "sampled_c" if sigma and kind in SIGMA_KINDS else regime
        out.setdefault((regime, kind), []).append((*v, k if kind in LOOP_KINDS else 0))

    for run in runs:
        k, width = run.k, forward_widths(run)
        regime = "sampled" if run.temperature > 0 else "greedy"
        sigma = run.temperature > 0 and run.sampler_c < 1
        for row in steady_rounds(run):
            b, c = width(row), _ctx(row)
            if _g(row, "verify_s") > 0:
                add(regime, "ar_step" if run.mode == "ar" else "verify", b, 1 if run.mode == "ar" else k + 1, c,
                    _g(row, "verify_s"))
            span = _g(row, "t1") - _g(row, "t0")
            if run.mode == "sd" and span > _g(row, "verify_s") > 0:
                add(regime, "draft_step", b, 1, c, (span - _g(row, "verify_s")) / k)
            if run.mode != "ssd":
                continue
            if _g(row, "glue_s") > 0:
                add(regime, "glue", b, k + 1, c, _g(row, "glue_s"))
            if _g(row, "fork_s") > 0:
                add(regime, "fork", b, k + 1, c, _g(row, "fork_s"))
            if _g(row, "tree_s") > 0:
                add(regime, "tree_step", b, tree_width(run, row), c, _g(row, "tree_s") / k)
            if _g(row, "backup_s") > 0 and run.backup == "neural":
                add(regime, "backup_step", b, 1, c, _g(row, "backup_s") / k)
    return out


def _line(xs: np.ndarray, ys: np.ndarray, ns: np.ndarray) -> list[float]:
    """Count-weighted least-squares line through per-x mean overheads; slope >= 0 (flat when a single x was
    seen), extrapolated linearly (the prefill and loop lines: one count each)."""
    if len(xs) < 2:
        return [float(ys[0]), 0.0]
    slope, base = np.polyfit(xs, ys, 1, w=np.sqrt(ns))
    if slope < 0:
        return [float(np.average(ys, weights=ns)), 0.0]
    return [float(base), float(slope)]


def fit_kind(model: LatencyModel | None, rows: list[tuple], above: list[float] | None = None,
             setup: float | None = None) -> tuple[list[float], dict]:
    """[base_s, per_token_s, per_row_s, per_position_s(, per_loop_s)] of one kind's overhead
    (calibration/overheads.plane): residuals against the microbenchmark model (the whole time for kinds with
    none) averaged per shape (width, new tokens per row, and for a K-step loop's steps its K; the mean: stalls
    are part of what throughput pays), then the plane through them.
    One curve over total tokens cannot hold both: verification's cost per verified position is paid once for
    the batch, and its cost per row once per row, so wide rounds sat below a per-token line through narrow
    ones and flattened its slope ~3x. `above` (a fitted plane): the result is that plane raised by the rows'
    mean excess over it (never below it), its slopes kept: how the C < 1 rows are fitted on top of the plain
    sampled ones. `setup` (a K-step loop's set-up fitted in another regime): used where these rows' shapes
    cannot price one themselves (fit_plane.loops_told_apart), the plane fitted to what is left after it."""
    by_shape: dict[tuple[int, int, int], list[float]] = {}
    for b, n, c, s, *steps in rows:
        key = (int(b), int(n), int(steps[0]) if steps else 0)
        by_shape.setdefault(key, []).append(float(s) - (model(b, n, c) if model is not None else 0.0))
    keys = sorted(by_shape)
    shapes = np.asarray(keys, float)
    ys = np.asarray([np.mean(by_shape[k]) for k in keys])
    ns = np.asarray([len(by_shape[k]) for k in keys], float)
    info: dict = {}
    if above is None and setup and not loops_told_apart(shapes[:, 0], shapes[:, 2], ns):
        line, info["selection"] = fit_plane(shapes, ys - setup / np.maximum(shapes[:, 2], 1), ns)
        line, info["setup_from"] = [*line[:4], *[0.0] * (4 - len(line)), float(setup)], "greedy"
    elif above is None:
        line, info["selection"] = fit_plane(shapes, ys, ns)
    else:
        above = list(above) + [0.0] * (4 - len(above))
        fitted = np.asarray([plane(above, b, n, k) for b, n, k in keys])
        extra = max(0.0, float(np.average(ys - fitted, weights=ns)))
        line, info["extra_over_sampled_s"] = [float(above[0] + extra), *map(float, above[1:])], extra
    return line, {"n": len(rows), "by_shape": {_shape_name(b, n, k): {"mean_overhead_s": float(y), "n": int(c)}
                                               for (b, n, k), y, c in zip(keys, ys, ns)}, "line": line, **info}


def _shape_name(b: int, n: int, k: int) -> str:
    return f"{b}x{n}" + (f"/K{k}" if k else "")


def fit_executor_costs(target: LatencyModel, draft: LatencyModel, runs: list[RunRounds],
                       mode: str | None = None) -> tuple[ExecutorCosts, dict]:
    """Per-kind, per-regime overhead lines; each kind from `mode`'s runs when they have it, else from all.
    A kind seen only greedy gets a sampled line = greedy + the mean sampled-minus-greedy difference of the
    same side's kinds seen in both (SD at T > 0 pays the sampling the SSD runs measured)."""
    all_rows = kind_rows(runs)
    mine = kind_rows([r for r in runs if r.mode == mode]) if mode else {}
    for key in [k for k in all_rows if k[0] == "sampled_c" and ("sampled", k[1]) not in all_rows]:
        all_rows[("sampled", key[1])] = all_rows.pop(key)   # no C = 1 rows at T > 0: C < 1 is the sampled line
        if key in mine:
            mine[("sampled", key[1])] = mine.pop(key)
    lines: dict[str, dict] = {"greedy": {}, "sampled": {}, "sampled_c": {}}
    info: dict = {}
    for (regime, kind), rows in sorted(all_rows.items(), key=lambda kv: REGIMES.index(kv[0][0])):
        rows = mine.get((regime, kind)) or rows
        model = None if kind == "fork" else (target if kind in ("verify", "ar_step") else draft)
        above = lines["sampled"][kind] if regime == "sampled_c" else None
        greedy = lines["greedy"].get(kind, [])      # a loop's set-up does not depend on the temperature
        setup = greedy[4] if regime == "sampled" and len(greedy) > 4 else None
        lines[regime][kind], info[f"{regime}.{kind}"] = fit_kind(model, rows, above, setup)
    g, s = lines["greedy"], lines["sampled"]
    for side in (_DRAFT_KINDS, tuple(k for k in KINDS if k not in _DRAFT_KINDS)):
        both = [k for k in side if k in g and k in s]
        if not both:
            continue
        d = np.mean([np.subtract(_padded(s[k]), _padded(g[k])) for k in both], axis=0)
        for k in side:
            if k in g and k not in s:
                derived = [float(g[k][0] + d[0]), *(max(0.0, float(a + b)) for a, b in zip(_padded(g[k])[1:], d[1:]))]
                s[k] = derived if kind_loops(k, derived) else derived[:4]
                info[f"sampled.{k}"] = {"derived_from": f"greedy.{k}", "sampling_extra": [float(v) for v in d],
                                        "from": both}
    return ExecutorCosts(lines={r: v for r, v in lines.items() if v}), info


def _padded(line: list[float]) -> list[float]:
    """A line as five numbers (the plane's terms, per_loop last; absent terms 0)."""
    return list(line) + [0.0] * (5 - len(line))


def kind_loops(kind: str, line: list[float]) -> bool:
    """Whether a line keeps its fifth (per-loop set-up) term: a K-step loop's kind with a set-up fitted."""
    return kind in LOOP_KINDS and len(line) > 4 and line[4] > 0


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
