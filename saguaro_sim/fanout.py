"""Fan-out allocation: how many candidate bonus tokens to cache at each acceptance length k (F_0..F_K)."""

from __future__ import annotations

import heapq
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


def exact_fanout(pmf: np.ndarray, miss: Callable[[int, int], float], budget: int,
                 max_fanout: int | None = None) -> tuple[int, ...]:
    """Exact integer optimum of sum_k P_k * miss(F_k, k) s.t. sum F_k <= budget.

    The objective is separable; with miss convex and non-increasing in F, handing out budget one unit at
    a time to the largest marginal gain is optimal (works with any measured miss curve of that shape).
    """
    n = len(pmf)
    f = [0] * n
    cur = [miss(0, k) for k in range(n)]
    heap = []
    for k in range(n):
        gain = pmf[k] * (cur[k] - miss(1, k))
        heapq.heappush(heap, (-gain, k))
    for _ in range(budget):
        if not heap:
            break
        neg, k = heapq.heappop(heap)
        if -neg <= 0:
            break
        f[k] += 1
        cur[k] = miss(f[k], k)
        if max_fanout is None or f[k] < max_fanout:
            heapq.heappush(heap, (-(pmf[k] * (cur[k] - miss(f[k] + 1, k))), k))
    return tuple(f)


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
