"""Latency fit: linear vs piecewise-linear in total tokens (+ a context term), chosen by cross-validation;
executor overheads and the effective SSD message time from real runs' rounds."""

from __future__ import annotations

from itertools import combinations

import numpy as np

from calibration.errors import ConfigError
from calibration.fit_acceptance import RunRounds, steady_rounds
from calibration.latency import LatencyModel

MAX_KNOT_CANDIDATES = 8
# one-standard-error rule: the simplest form whose CV error is within one standard error of the best wins


def latency_arrays(rows: list[dict], where: str = "latency") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens = batch*new_tokens, batch*context, median seconds) from latency rows, validated."""
    if not rows:
        raise ConfigError(where, "no latency rows to fit", "rows with batch, new_tokens, context, median_s")
    xs, zs, ys = [], [], []
    for i, r in enumerate(rows):
        try:
            b, n, c, y = int(r["batch"]), int(r["new_tokens"]), float(r.get("context", 0)), float(r["median_s"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{where}[{i}]", f"malformed row ({e})", "batch, new_tokens, context, median_s") from None
        if b < 1 or n < 1 or c < 0 or not y > 0:
            raise ConfigError(f"{where}[{i}]", f"bad values batch={b} new_tokens={n} context={c} median_s={y}",
                              "batch >= 1, new_tokens >= 1, context >= 0, median_s > 0")
        xs.append(b * n)
        zs.append(b * c)
        ys.append(y)
    return np.asarray(xs, float), np.asarray(zs, float), np.asarray(ys, float)


def _design(x: np.ndarray, z: np.ndarray, knots: tuple[float, ...]) -> np.ndarray:
    cols = [np.ones_like(x), x] + [np.maximum(0.0, x - k) for k in knots] + [z]
    return np.stack(cols, axis=1)


def _fit_one(x: np.ndarray, z: np.ndarray, y: np.ndarray, knots: tuple[float, ...]) -> LatencyModel:
    """Least squares on relative error; linear coefficients >= 0, hinge slopes free, per_context >= 0."""
    from scipy.optimize import lsq_linear  # imported here: `import calibration` stays fast
    a = _design(x, z, knots) / y[:, None]
    lo = np.full(a.shape[1], -np.inf)
    lo[-1] = 0.0
    if not knots:
        lo[:] = 0.0
    keep = np.linalg.norm(a, axis=0) > 0  # a hinge beyond every training point has nothing to fit
    coef = np.zeros(a.shape[1])
    coef[keep] = lsq_linear(a[:, keep], np.ones_like(y), bounds=(lo[keep], np.full(int(keep.sum()), np.inf))).x
    per_context = float(max(0.0, coef[-1]))
    if not knots:
        return LatencyModel.linear(base=float(coef[0]), per_token=float(coef[1]), per_context=per_context)
    kx = sorted({float(x.min()), *knots, float(x.max())})
    basis = _design(np.asarray(kx), np.zeros(len(kx)), knots)
    ky = np.maximum(0.0, basis @ coef)
    return LatencyModel.piecewise(kx, [float(v) for v in ky], per_context=per_context)


def _predict(model: LatencyModel, x: np.ndarray, z: np.ndarray) -> np.ndarray:
    # batch=1 with new_tokens=x and context=z gives exactly the forms' inputs (batch*new, batch*context)
    return np.asarray([model(1, xi, zi) for xi, zi in zip(x, z)])


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - y) / y))


def _folds(n: int, k: int = 5, seed: int = 0) -> list[np.ndarray]:
    idx = np.random.default_rng(seed).permutation(n)
    if n < 2 * k:
        return [np.array([i]) for i in idx]  # leave-one-out for small grids
    return [idx[i::k] for i in range(k)]


def cv_errors(x: np.ndarray, z: np.ndarray, y: np.ndarray, knots: tuple[float, ...]) -> np.ndarray:
    """Held-out absolute relative errors of one form (5-fold, leave-one-out when the grid is small)."""
    errs = []
    for test in _folds(len(y)):
        train = np.setdiff1d(np.arange(len(y)), test)
        if len(train) < len(knots) + 3:
            continue
        m = _fit_one(x[train], z[train], y[train], knots)
        errs.append(np.abs(_predict(m, x[test], z[test]) - y[test]) / y[test])
    return np.concatenate(errs) if errs else np.array([np.inf])


def cv_mape(x: np.ndarray, z: np.ndarray, y: np.ndarray, knots: tuple[float, ...]) -> float:
    """Mean absolute percentage error of the form on held-out folds."""
    return float(np.mean(cv_errors(x, z, y, knots)))


def knot_candidates(x: np.ndarray) -> list[float]:
    """Interior distinct token counts, thinned to at most MAX_KNOT_CANDIDATES (geometric spacing)."""
    inner = np.unique(x)[1:-1]
    if len(inner) <= MAX_KNOT_CANDIDATES:
        return [float(v) for v in inner]
    pick = np.unique(np.round(np.geomspace(1, len(inner), MAX_KNOT_CANDIDATES)).astype(int) - 1)
    return [float(inner[i]) for i in pick]


def fit_latency(rows: list[dict], where: str = "latency", max_knots: int = 2) -> tuple[LatencyModel, dict]:
    """Fit one model's latency grid; returns the chosen model and {"form", "knots", "cv_mape", "mape", "n"}."""
    x, z, y = latency_arrays(rows, where)
    if len(y) < 3 or len(np.unique(x)) < 2:
        model = _fit_one(x, z, y, ())
        return model, {"form": "linear", "knots": [], "cv_mape": None, "mape": _mape(_predict(model, x, z), y),
                       "n": int(len(y)), "candidates": 1}
    cands = knot_candidates(x)
    forms: list[tuple[float, ...]] = [()]
    for m in range(1, max_knots + 1):
        forms += list(combinations(cands, m))
    errs = [(cv_errors(x, z, y, kn), kn) for kn in forms]
    scores = [(float(np.mean(e)), kn) for e, kn in errs]
    i_best = int(np.argmin([s for s, _ in scores]))
    e_best = errs[i_best][0]
    limit = scores[i_best][0] + float(np.std(e_best) / np.sqrt(len(e_best)))
    ok = [(len(kn), s, kn) for s, kn in scores if s <= limit + 1e-12]
    _, score, knots = min(ok, key=lambda t: (t[0], t[1]))
    model = _fit_one(x, z, y, knots)
    info = {"form": "piecewise" if knots else "linear", "knots": list(knots), "cv_mape": score,
            "mape": _mape(_predict(model, x, z), y), "n": int(len(y)), "candidates": len(forms)}
    return model, info


def with_overhead(model: LatencyModel, xs: list[float], overhead: list[float]) -> LatencyModel:
    """model + overhead(tokens), the overhead interpolated between (xs, overhead) and flat outside them
    (tokens = batch * new_tokens); the result is piecewise-linear in tokens, kept >= 0."""
    p = model.params
    if model.kind not in ("linear", "piecewise"):
        raise ConfigError("latency.kind", f"cannot add an overhead to a {model.kind!r} model", "linear | piecewise")
    base_x = list(p["knots_x"]) if model.kind == "piecewise" else [1.0]
    knots = sorted({*base_x, *map(float, xs), float(max(*base_x, *xs)) + 1.0})
    ys = [max(0.0, model(1, x, 0.0) + float(np.interp(x, xs, overhead))) for x in knots]
    return LatencyModel.piecewise(knots, ys, p.get("per_context", 0.0))


def fit_overhead(model: LatencyModel, rows: list[tuple[int, int, float, float]]) -> tuple[list[float], list[float], dict]:
    """Executor overhead per forward as a function of tokens, from effective forward times in real runs.

    rows: (batch, new_tokens, context, seconds). Residuals against the microbenchmark model are averaged
    per token count (the mean, not the median: scheduling spikes are part of what throughput pays);
    with_overhead interpolates between them. Returns (token counts, mean overheads, info).
    """
    by_x: dict[float, list[float]] = {}
    for b, n, c, s in rows:
        by_x.setdefault(float(b * n), []).append(float(s) - model(b, n, c))
    xs = sorted(by_x)
    med = [float(np.mean(by_x[x])) for x in xs]
    info = {"n": len(rows), "by_tokens": {str(int(x)): {"mean_overhead_s": m, "n": len(by_x[x])}
                                          for x, m in zip(xs, med)}}
    return xs, med, info


def _ctx(row: dict) -> float:
    c = row.get("context", 0)
    return float(np.mean(c)) if isinstance(c, list | tuple) and c else float(c or 0)


def _getter(row: dict):
    return lambda key: float(row.get(key) or 0.0)


def ssd_build_s(row: dict) -> float:
    """A real SSD round's build as the model sees it: glue + fork + tree + reply (the cache lookup follows
    every build; a backup inside the reply is modelled separately)."""
    g = _getter(row)
    return g("glue_s") + g("fork_s") + g("tree_s") + max(0.0, g("draft_reply_s") - g("backup_s"))


def executor_rows(runs: list[RunRounds]) -> dict[str, list[tuple[int, int, float, float]]]:
    """Effective forward times in real runs, (batch, new_tokens, context, s), in the simulator's time model:
    verification = target(b, K+1); AR step = target(b, 1); SD draft step = draft(b, 1) (round - verify) / K;
    SSD glue = draft(b, K+1); SSD tree step = draft(b, ceil(budget/devices)) ((build - glue) / K, see
    ssd_build_s)."""
    out: dict[str, list] = {"target": [], "draft": []}
    for run in runs:
        k = run.k
        width = -(-(run.budget or 0) // max(1, run.draft_devices))
        for row in steady_rounds(run):
            b, c = int(row.get("batch", 1)), _ctx(row)
            g = _getter(row)
            if g("verify_s") > 0:
                out["target"].append((b, 1 if run.mode == "ar" else k + 1, c, g("verify_s")))
            span = g("t1") - g("t0")
            if run.mode == "sd" and span > g("verify_s") > 0:  # drafting + catching up = all but verification
                out["draft"].append((b, 1, c, (span - g("verify_s")) / k))
            if run.mode == "ssd":
                if g("glue_s") > 0:
                    out["draft"].append((b, k + 1, c, g("glue_s")))
                if g("tree_s") > 0 and width > 0:
                    out["draft"].append((b, width, c, (ssd_build_s(row) - g("glue_s")) / k))
                if g("backup_s") > 0 and run.backup == "neural":
                    out["draft"].append((b, 1, c, g("backup_s") / k))
    return out


def effective_link_s(runs: list[RunRounds], link_s: float = 0.0) -> tuple[float | None, dict]:
    """One-way message time m >= link_s (the microbenchmarked one) that makes the model's SSD round match real
    SSD rounds on average: mean(max(verify + 2 m, build)) + mean(backup) = mean(round), by bisection, with
    each round's measured phases (build = ssd_build_s). Whatever the round spends beyond both paths
    (wake-ups, scheduling on a busy machine) lands in m: it then costs every round, whichever path binds;
    putting it on the build side instead fitted the fidelity benchmark's unseen configs worse."""
    obs = []
    for run in runs:
        if run.mode != "ssd":
            continue
        for r in steady_rounds(run):
            if r.get("verify_s") and r.get("t1") is not None and r.get("t0") is not None:
                g = _getter(r)
                obs.append((g("t1") - g("t0"), g("verify_s"), ssd_build_s(r), g("backup_s")))
    if not obs:
        return None, {"n": 0}
    t, v, build, bk = (np.asarray(x) for x in zip(*obs))
    goal = float(t.mean())

    def period(m: float) -> float:
        return float(np.maximum(v + 2 * m, build).mean() + bk.mean())

    lo, hi = float(link_s), max(goal, float(link_s))
    if period(lo) < goal:
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if period(mid) < goal else (lo, mid)
    return lo, {"n": len(obs), "one_way_s": lo, "mean_round_s": goal, "mean_verify_s": float(v.mean()),
                "mean_build_s": float(build.mean()), "build_bound_share": float(np.mean(build > v + 2 * lo))}


def verifier_gap_s(runs: list[RunRounds]) -> tuple[float | None, dict]:
    """Push-protocol SSD runs: the verifier's own time between two verifications when the round before hit
    (sending the outcome, checking and looking up the received cache, posting the next receive): the median
    of wait_s + msg_s over steady rounds whose speculation came from the cache. None without such rounds."""
    gaps = [float(r.get("wait_s", 0.0)) + float(r.get("msg_s", 0.0)) for run in runs for r in steady_rounds(run)
            if r.get("verify_s") and not any(r.get("from_backup") or [])]
    if not gaps:
        return None, {"n": 0}
    return float(np.median(gaps)), {"n": len(gaps), "median_s": float(np.median(gaps)),
                                    "mean_s": float(np.mean(gaps))}
