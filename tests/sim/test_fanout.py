"""Fan-out allocation: greedy integer optimum equals brute force; geometric fan-out follows Theorem 12."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saguaro_sim.fanout import (
    accept_length_pmf,
    brute_force_fanout,
    exact_fanout,
    geometric_fanout,
    geometric_fanout_real,
    round_to_budget,
    uniform_fanout,
)


def power_miss(c, r):
    return lambda f, k: 1.0 if f <= 0 else min(1.0, c * f ** (-r))


def objective(pmf, miss, fanout):
    return sum(pmf[k] * miss(f, k) for k, f in enumerate(fanout))


@pytest.mark.parametrize("alpha,r,c,k,budget", [(0.8, 0.5, 0.3, 3, 7), (0.5, 0.4, 0.8, 2, 9), (0.9, 0.55, 0.2, 4, 6),
                                                (0.3, 1.0, 0.5, 3, 5), (0.7, 0.45, 0.6, 1, 10)])
def test_exact_fanout_equals_brute_force_power_law(alpha, r, c, k, budget):
    pmf = accept_length_pmf(alpha, k)
    miss = power_miss(c, r)
    greedy = exact_fanout(pmf, miss, budget)
    best, best_alloc = brute_force_fanout(pmf, miss, budget)
    assert sum(greedy) <= budget
    assert objective(pmf, miss, greedy) == pytest.approx(best, abs=1e-12)


def test_exact_fanout_equals_brute_force_on_measured_tables():
    rng = np.random.default_rng(3)
    for _ in range(6):
        k = int(rng.integers(1, 4))
        # a convex, non-increasing measured miss curve per position (cumulative sums of shrinking drops)
        tables = []
        for _pos in range(k + 1):
            drops = np.sort(rng.uniform(0, 0.2, 8))[::-1]
            tables.append(np.concatenate([[1.0], 1.0 - np.cumsum(drops)]).clip(0, 1))
        miss = lambda f, kk, t=tables: float(t[kk][min(f, len(t[kk]) - 1)])  # noqa: E731
        pmf = rng.dirichlet(np.ones(k + 1))
        budget = int(rng.integers(1, 9))
        greedy = exact_fanout(pmf, miss, budget)
        best, _ = brute_force_fanout(pmf, miss, budget)
        assert objective(pmf, miss, greedy) == pytest.approx(best, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(alpha=st.floats(0.05, 0.95), r=st.floats(0.2, 1.5), c=st.floats(0.05, 0.5), k=st.integers(1, 3),
       budget=st.integers(0, 8))
def test_exact_fanout_never_worse_than_brute_force(alpha, r, c, k, budget):
    pmf = accept_length_pmf(alpha, k)
    miss = power_miss(c, r)
    best, _ = brute_force_fanout(pmf, miss, budget)
    assert objective(pmf, miss, exact_fanout(pmf, miss, budget)) <= best + 1e-12


def test_exact_fanout_on_nonconvex_power_law():
    pmf = accept_length_pmf(0.3, 3)
    miss = power_miss(1.0, 1.0)
    best, _ = brute_force_fanout(pmf, miss, 5)  # (3, 2, 0, 0): 0.4283; greedy gives (5, 0, 0, 0): 0.44
    assert objective(pmf, miss, exact_fanout(pmf, miss, 5)) == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize("alpha,r,k", [(0.8, 0.5, 4), (0.6, 0.4, 6), (0.9, 0.55, 3)])
def test_geometric_fanout_theorem12_ratios(alpha, r, k):
    f = geometric_fanout_real(alpha, r, k, budget=100.0)
    assert f.sum() == pytest.approx(100.0)
    for j in range(k):
        assert f[j] / f[0] == pytest.approx(alpha ** (j / (1 + r)))
    assert f[k] / f[0] == pytest.approx(alpha ** (k / (1 + r)) * (1 - alpha) ** (-1 / (1 + r)))


def test_geometric_is_the_large_budget_limit_of_the_exact_allocator():
    alpha, r, c, k, budget = 0.7, 0.5, 0.5, 4, 3000
    pmf = accept_length_pmf(alpha, k)
    exact = np.array(exact_fanout(pmf, power_miss(c, r), budget), dtype=float)
    geo = geometric_fanout_real(alpha, r, k, budget)
    assert np.allclose(exact / budget, geo / budget, atol=2e-3)


def test_integer_fanouts_sum_to_budget_and_geometric_beats_uniform():
    alpha, r, c, k = 0.8, 0.5, 0.4, 5
    pmf = accept_length_pmf(alpha, k)
    miss = power_miss(c, r)
    for budget in (6, 13, 24, 50):
        geo, uni = geometric_fanout(alpha, r, k, budget), uniform_fanout(k, budget)
        assert sum(geo) == budget and sum(uni) == budget
        assert objective(pmf, miss, geo) <= objective(pmf, miss, uni) + 1e-12
        assert objective(pmf, miss, exact_fanout(pmf, miss, budget)) <= objective(pmf, miss, geo) + 1e-12


def test_round_to_budget_is_exact():
    assert round_to_budget(np.array([1.4, 1.4, 1.2]), 4) == (2, 1, 1)
    assert sum(round_to_budget(np.array([0.2] * 7), 1)) == 1
