"""Fan-out allocation: how many candidate bonus tokens to cache at each acceptance length k (F_0..F_K)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from calibration.errors import ConfigError


def accept_length_pmf(alpha: float, k: int) -> np.ndarray:
    """P(exactly j accepted), j=0..k, under i.i.d. acceptance alpha."""
    j = np.arange(k + 1)
    p = alpha ** j * (1 - alpha)
    p[k] = alpha ** k
    return p


def geometric_fanout_real(alpha: float, r: float, k: int, budget: float) -> np.ndarray:
    """Theorem 12: F_k proportional to P_k^(1/(1+r)), scaled so the F's sum to the budget (real-valued)."""
    w = accept_length_pmf(alpha, k) ** (1.0 / (1.0 + r))
    if w.sum() <= 0:
        w = np.ones(k + 1)
    return budget * w / w.sum()


def round_to_budget(real: np.ndarray, budget: int) -> tuple[int, ...]:
    """Largest-remainder rounding of a real allocation to integers summing exactly to budget."""
    base = np.floor(real).astype(int)
    rest = budget - int(base.sum())
    order = np.argsort(-(real - base), kind="stable")
    for i in order[:max(0, rest)]:
        base[i] += 1
    return tuple(int(x) for x in base)


def geometric_fanout(alpha: float, r: float, k: int, budget: int) -> tuple[int, ...]:
    """Integer geometric fan-out (Theorem 12 rounded to the budget)."""
    return round_to_budget(geometric_fanout_real(alpha, r, k, budget), budget)


def uniform_fanout(k: int, budget: int) -> tuple[int, ...]:
    """The same fan-out at every position (the baseline the paper compares against)."""
    return round_to_budget(np.full(k + 1, budget / (k + 1)), budget)


def exact_fanouts(pmf: np.ndarray, miss: Callable[[int, int], float], budgets: list[int],
                  max_fanout: int | None = None) -> dict[int, tuple[int, ...]]:
    """Exact integer optimum of sum_k P_k * miss(F_k, k) s.t. sum F_k <= B, for every B in budgets at once.

    A dynamic programme over positions (O(K * B^2) with numpy) is exact for any miss curve, convex or not
    (a clipped power law min(1, c F^-r) is not), measured tables included. Ties go to the smaller total.
    """
    top = max(budgets) if budgets else 0
    n = len(pmf)
    cap = top if max_fanout is None else min(top, max_fanout)
    cost = np.full((n, top + 1), np.inf)
    for k in range(n):
        cost[k, :cap + 1] = [pmf[k] * miss(f, k) for f in range(cap + 1)]
    best = cost[0].copy()  # best[b] = min cost of positions 0..k using exactly b units
    choice = [np.arange(top + 1)]
    idx = np.arange(top + 1)
    for k in range(1, n):
        # cand[b, f] = best[b - f] + cost[k, f] for f <= b
        diff = idx[:, None] - idx[None, :]
        cand = np.where(diff >= 0, best[np.clip(diff, 0, top)] + cost[k][None, :], np.inf)
        f_opt = np.argmin(cand, axis=1)
        best = cand[idx, f_opt]
        choice.append(f_opt)
    out = {}
    for budget in budgets:
        b = int(np.argmin(best[:budget + 1] + 1e-15 * idx[:budget + 1]))  # smallest total among equals
        alloc = [0] * n
        for k in range(n - 1, 0, -1):
            alloc[k] = int(choice[k][b])
            b -= alloc[k]
        alloc[0] = b
        out[budget] = tuple(alloc)
    return out


def exact_fanout(pmf: np.ndarray, miss: Callable[[int, int], float], budget: int,
                 max_fanout: int | None = None) -> tuple[int, ...]:
    """Exact integer optimum for one budget (see exact_fanouts)."""
    return exact_fanouts(pmf, miss, [budget], max_fanout)[budget]


def brute_force_fanout(pmf: np.ndarray, miss: Callable[[int, int], float], budget: int) -> tuple[float, tuple]:
    """Exhaustive search (small cases only): the reference the greedy allocator is tested against."""
    n = len(pmf)
    best = (float("inf"), ())

    def rec(i: int, left: int, acc: list[int]) -> None:
        nonlocal best
        if i == n:
            val = sum(pmf[k] * miss(acc[k], k) for k in range(n))
            if val < best[0] - 1e-15:
                best = (val, tuple(acc))
            return
        for f in range(left + 1):
            rec(i + 1, left - f, acc + [f])

    rec(0, budget, [])
    return best


def check_fanout(field: str, fanout: object, k: int) -> tuple[int, ...]:
    """Validate a user fan-out: K+1 non-negative integers."""
    if not isinstance(fanout, list | tuple):
        raise ConfigError(field, f"expected a list of {k + 1} integers, got {type(fanout).__name__}",
                          f"list of k+1 = {k + 1} integers >= 0")
    if len(fanout) != k + 1:
        raise ConfigError(field, f"has {len(fanout)} entries but k = {k} needs {k + 1}",
                          f"list of k+1 = {k + 1} integers >= 0")
    for i, f in enumerate(fanout):
        if isinstance(f, bool) or not isinstance(f, int) or f < 0 or f > 4096:
            raise ConfigError(f"{field}[{i}]", f"{f!r} is not a valid fan-out", "integers in [0, 4096]")
    return tuple(int(f) for f in fanout)
