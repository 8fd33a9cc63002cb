"""Executor costs from real runs' rounds: overheads per kind of forward beyond the microbenchmarks (SSD's
draft-side round, its jitter and the message times: calibration/fit_ssd_round.py).

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
from calibration.repeats import MIN_REPEATS_TO_TRIM, trimmed_mean


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
    did in SSD before it moved its live rows over finished ones)."""
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


PREEMPT_SHARE, PREEMPT_MIN_S = 0.2, 2e-4   # wall beyond the verifier's CPU time that marks a round preempted


def lost_core(wall_s: float, off_core_s: float) -> bool:
    """A thread spent ``off_core_s`` of a ``wall_s`` span off its core by more than the preemption rule allows
    (20% of the span, 0.2 ms at least): the host ran something else there."""
    return off_core_s > max(PREEMPT_MIN_S, PREEMPT_SHARE * wall_s)


def preempted(row: dict) -> bool:
    """The verifier lost its core for part of this round (CPU runs record ``verify_cpu_s``): another process or
    the hypervisor ran there, which is no cost of the forward (2026-12-02: one calibration run overlapped by a
    test run verified 4x slow and put a 7 ms overhead into every verification of the fit)."""
    cpu = row.get("verify_cpu_s")
    wall = float(row.get("verify_s") or 0.0)
    return cpu is not None and lost_core(wall, wall - float(cpu))


def timed_rounds(run: RunRounds) -> tuple[list[dict], int]:
    """A run's steady rounds without the preempted ones, and how many were left out; a run preempted in more
    than half its rounds is kept whole (what is left would not be the run)."""
    rows = steady_rounds(run)
    kept = [r for r in rows if not preempted(r)]
    return (kept, len(rows) - len(kept)) if 2 * len(kept) >= len(rows) else (rows, 0)


def unshared(verify_s: float, build_s: float, beside: float) -> tuple[float, float]:
    """(verification, build) seconds at full speed from an SSD round's measured ones, when the two ran beside
    each other ``beside``-fold slower while both computed (Profile.beside_slowdown): starting together, they
    overlap for the shorter one's wall time, in which each did 1/beside of it; the rest ran at full speed."""
    if beside <= 1.0 or verify_s <= 0 or build_s <= 0:
        return verify_s, build_s
    extra = (beside - 1.0) * min(verify_s, build_s) / beside
    return verify_s - extra, build_s - extra


def kind_rows(runs: list[RunRounds], beside: float = 1.0
              ) -> dict[tuple[str, str], list[tuple[int, int, float, float, int, int]]]:
    """{(regime, kind): [(width, new_tokens, context, seconds, steps, run)]} from steady rounds (regime "sampled_c":
    the SIGMA_KINDS of runs at T > 0 with C < 1; steps: the K of a LOOP_KINDS forward's loop, else 0). SSD
    rounds whose draft built beside the verification (``run.overlap``) are taken at full speed (``unshared``
    at ``beside``): the simulator slows them again where they overlap, so the fit must not count it twice.
    Preempted rounds are left out (``timed_rounds``)."""
    out: dict[tuple[str, str], list] = {}
    sigma = False

    def add(regime: str, kind: str, *v: float) -> None:
        regime = "sampled_c" if sigma and kind in SIGMA_KINDS else regime
        out.setdefault((regime, kind), []).append((*v, k if kind in LOOP_KINDS else 0, run_i))

    for run_i, run in enumerate(runs):  # noqa: B007 (add reads run_i: a row's run, for shape_overhead)
        k, width = run.k, forward_widths(run)
        regime = "sampled" if run.temperature > 0 else "greedy"
        sigma = run.temperature > 0 and run.sampler_c < 1
        for row in timed_rounds(run)[0]:
            b, c = width(row), _ctx(row)
            fv = fb = 1.0                         # full-speed shares of the measured verification and build
            if run.mode == "ssd" and run.overlap and beside > 1.0:
                wall_v, wall_b = _g(row, "verify_s"), sum(_g(row, f"{p}_s") for p in ("glue", "fork", "tree"))
                v, bld = unshared(wall_v, wall_b, beside)
                fv, fb = (v / wall_v if wall_v > 0 else 1.0), (bld / wall_b if wall_b > 0 else 1.0)
            if _g(row, "verify_s") > 0:
                add(regime, "ar_step" if run.mode == "ar" else "verify", b, 1 if run.mode == "ar" else k + 1, c,
                    _g(row, "verify_s") * fv)
            span = _g(row, "t1") - _g(row, "t0")
            if run.mode == "sd" and span > _g(row, "verify_s") > 0:
                add(regime, "draft_step", b, 1, c, (span - _g(row, "verify_s")) / k)
            if run.mode != "ssd":
                continue
            if _g(row, "glue_s") > 0:
                add(regime, "glue", b, k + 1, c, _g(row, "glue_s") * fb)
            if _g(row, "fork_s") > 0:
                add(regime, "fork", b, k + 1, c, _g(row, "fork_s") * fb)
            if _g(row, "tree_s") > 0:
                add(regime, "tree_step", b, tree_width(run, row), c, _g(row, "tree_s") * fb / k)
            if _g(row, "backup_s") > 0 and run.backup == "neural":
                add(regime, "backup_step", b, 1, c, _g(row, "backup_s") / k)
    return out


def _line(xs: np.ndarray, ys: np.ndarray, ns: np.ndarray, min_slope: float = 0.0) -> list[float]:
    """Count-weighted least-squares line through per-x mean overheads; slope >= ``min_slope`` (else, and when
    a single x was seen, flat at their mean), extrapolated linearly (the prefill and loop lines: one count each)."""
    if len(xs) < 2:
        return [float(ys[0]), 0.0]
    slope, base = np.polyfit(xs, ys, 1, w=np.sqrt(ns))
    if slope < min_slope:
        return [float(np.average(ys, weights=ns)), 0.0]
    return [float(base), float(slope)]


def fit_kind(model: LatencyModel | None, rows: list[tuple], above: list[float] | None = None,
             setup: float | None = None) -> tuple[list[float], dict]:
    """[base_s, per_token_s, per_row_s, per_position_s(, per_loop_s)] of one kind's overhead
    (calibration/overheads.plane): residuals against the microbenchmark model (the whole time for kinds with
    none) averaged per shape (width, new tokens per row, and for a K-step loop's steps its K; ``shape_overhead``:
    the mean within a run, stalls are part of what throughput pays; trimmed over repeated runs), then the
    plane through them.
    One curve over total tokens cannot hold both: verification's cost per verified position is paid once for
    the batch, and its cost per row once per row, so wide rounds sat below a per-token line through narrow
    ones and flattened its slope ~3x. `above` (a fitted plane): the result is that plane raised by the rows'
    mean excess over it (never below it), its slopes kept: how the C < 1 rows are fitted on top of the plain
    sampled ones. `setup` (a K-step loop's set-up fitted in another regime): used where these rows' shapes
    cannot price one themselves (fit_plane.loops_told_apart), the plane fitted to what is left after it."""
    by_shape: dict[tuple[int, int, int], dict[int, list[float]]] = {}
    for b, n, c, s, *rest in rows:
        key = (int(b), int(n), int(rest[0]) if rest else 0)
        runs = by_shape.setdefault(key, {})
        runs.setdefault(int(rest[1]) if len(rest) > 1 else 0, []).append(
            float(s) - (model(b, n, c) if model is not None else 0.0))
    keys = sorted(by_shape)
    shapes = np.asarray(keys, float)
    ys = np.asarray([shape_overhead(by_shape[k]) for k in keys])
    ns = np.asarray([sum(map(len, by_shape[k].values())) for k in keys], float)
    info: dict = {}
    if above is None and setup and not loops_told_apart(shapes[:, 0], shapes[:, 2], ns):
        line, info["selection"] = fit_plane(shapes, ys - setup / np.maximum(shapes[:, 2], 1), ns)
        line, info["setup_from"] = [*_padded(line)[:4], float(setup)], "greedy"
    elif above is None:
        line, info["selection"] = fit_plane(shapes, ys, ns)
    else:
        above = list(above) + [0.0] * (4 - len(above))
        fitted = np.asarray([plane(above, b, n, k) for b, n, k in keys])
        extra = max(0.0, float(np.average(ys - fitted, weights=ns)))
        line, info["extra_over_sampled_s"] = [float(above[0] + extra), *map(float, above[1:])], extra
    return line, {"n": len(rows), "by_shape": {_shape_name(b, n, k): {"mean_overhead_s": float(y), "n": int(c)}
                                               for (b, n, k), y, c in zip(keys, ys, ns)}, "line": line, **info}


def shape_overhead(per_run: dict[int, list[float]]) -> float:
    """One shape's overhead from its rows grouped by run: the mean within a run (its stalls are what its
    throughput pays), then, where at least MIN_REPEATS_TO_TRIM runs saw the shape (repeated passes, e.g.
    bench_fidelity's), the trimmed mean over runs (calibration/repeats.py; it beat the plain mean and the median on
    3 of 5 sessions' replays: docs/BENCHMARKS.md, fourteenth session). Fewer runs: the mean of all rows."""
    if len(per_run) >= MIN_REPEATS_TO_TRIM:
        return trimmed_mean([float(np.mean(v)) for v in per_run.values()])
    return float(np.mean([x for v in per_run.values() for x in v]))


def _shape_name(b: int, n: int, k: int) -> str:
    return f"{b}x{n}" + (f"/K{k}" if k else "")


def fit_executor_costs(target: LatencyModel, draft: LatencyModel, runs: list[RunRounds],
                       mode: str | None = None, beside: float = 1.0) -> tuple[ExecutorCosts, dict]:
    """Per-kind, per-regime overhead lines; each kind from `mode`'s runs when they have it, else from all
    (SSD's overlapped verification and build taken at full speed: ``kind_rows`` at ``beside``).
    A kind seen only greedy gets a sampled line = greedy + the mean sampled-minus-greedy difference of the
    same side's kinds seen in both (SD at T > 0 pays the sampling the SSD runs measured)."""
    all_rows = kind_rows(runs, beside)
    info: dict = {"preempted_rounds_left_out": sum(timed_rounds(r)[1] for r in runs)}
    mine = kind_rows([r for r in runs if r.mode == mode], beside) if mode else {}
    for key in [k for k in all_rows if k[0] == "sampled_c" and ("sampled", k[1]) not in all_rows]:
        all_rows[("sampled", key[1])] = all_rows.pop(key)   # no C = 1 rows at T > 0: C < 1 is the sampled line
        if key in mine:
            mine[("sampled", key[1])] = mine.pop(key)
    lines: dict[str, dict] = {"greedy": {}, "sampled": {}, "sampled_c": {}}
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
                s[k] = derived if k in LOOP_KINDS and derived[4] > 0 else derived[:4]   # a set-up only for loops
                info[f"sampled.{k}"] = {"derived_from": f"greedy.{k}", "sampling_extra": [float(v) for v in d],
                                        "from": both}
    return ExecutorCosts(lines={r: v for r, v in lines.items() if v}), info


def _padded(line: list[float]) -> list[float]:
    """A line as five numbers (the plane's terms, per_loop last; absent terms 0)."""
    return list(line) + [0.0] * (5 - len(line))
