"""Optimizer search space, constraints, Pareto frontier and ranking logic, driven by a tiny local closed form
of Theorem 7 / Corollary 16 (so these tests do not depend on the analytic model or the simulator)."""

import itertools
import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibration import AcceptanceModel, ConfigError, HitCurve, LatencyModel, Profile
from saguaro_sim import SpecConfig, Workload
from saguaro_sim.fanout import brute_force_fanout
from saguaro_sim.optimize import confirm_workload, devices_used, optimize
from saguaro_sim.pareto import pareto_front
from saguaro_sim.resolve import resolve_fanouts
from saguaro_sim.search import (
    Constraints,
    budgets_for,
    candidates,
    exact_schedules,
    sampler_cs,
)


@dataclass
class Toy:
    tokens_per_s_per_seq: float
    throughput: float
    p_hit: float
    tokens_per_round: float
    hit_rate: float = 0.0

    def to_dict(self):
        return dict(self.__dict__)


def toy_predict(profile, spec, workload, seed=0):
    """Theorem 7 with the batch form (Corollary 16), constant-context latencies."""
    b, k, ctx = spec.batch_size, spec.k, workload.prompt_tokens + workload.output_tokens / 2
    tv = profile.target(b, k + 1, ctx)
    if spec.mode == "ar":
        t, e, p = profile.target(b, 1, ctx), 1.0, 0.0
    else:
        pmf = profile.acceptance.length_pmf(k, spec.temperature, spec.sampler_c)
        e = profile.acceptance.expected_tokens(k, spec.temperature, spec.sampler_c)
        step = profile.draft(b, 1, ctx)
        if spec.mode == "sd":
            t, p = k * step + tv, 0.0
        else:
            fan, _ = resolve_fanouts(profile, spec)
            p = sum(pmf[j] * profile.hits.hit(fan[j], j, spec.temperature, False, spec.sampler_c)
                    for j in range(k + 1))
            tree = profile.draft(b, math.ceil(spec.budget / spec.draft_devices), ctx)
            tp = profile.draft(b, k + 1, ctx) + k * tree + 2 * profile.link_s
            tb = k * step if spec.backup == "neural" else profile.fast_backup_s
            t = p ** b * max(tv, tp) + (1 - p ** b) * (tv + tb)
            if spec.backup == "fast":
                e = p * e + (1 - p)
    return Toy(e / t, b * e / t, p, e, p)


def toy_profile(alpha=0.85, draft_step=0.002, per_token=0.0, c=0.3, link=0.0001, target_per_token=0.0, **kw):
    return Profile(name="toy", target=LatencyModel.linear(0.02, target_per_token),
                   draft=LatencyModel.linear(base=draft_step, per_token=per_token), link_s=link,
                   acceptance=AcceptanceModel.geometric(alpha), hits=HitCurve.power_law(c, 0.5), **kw)


WL = Workload(num_sequences=4, output_tokens=64, prompt_tokens=16)


def run(profile, **kw):
    return optimize(profile, WL, predictor=toy_predict, simulator=toy_predict, **kw)


def test_budgets_and_cs():
    assert budgets_for(3, 256) == [4, 8, 12, 16, 20, 24, 32, 48, 64, 128, 256]
    assert budgets_for(4, 40) == [5, 8, 10, 15, 16, 20, 25, 30, 32, 40]
    assert budgets_for(7, 64) == [8, 16, 24, 32, 40, 48, 64]
    assert budgets_for(10, 5) == [5]
    prof = toy_profile().with_(hits=HitCurve.power_law(0.3, 0.5, c_effect={0.5: 0.7}),
                               acceptance=AcceptanceModel.geometric(0.8, c_effect={0.25: 0.8}))
    assert sampler_cs(prof, 0.7) == [1.0, 0.5, 0.25]
    assert sampler_cs(prof, 0.0) == [1.0]  # greedy decoding: Saguaro sampling does not apply
    assert sampler_cs(toy_profile(), 0.7) == [1.0]


def test_grid_honours_constraints():
    cons = Constraints(k_range=(2, 4), max_budget=32, max_draft_devices=2, backups=("fast",))
    grid = candidates(toy_profile(), 4, 0.0, cons)
    ssd = [c.spec for c in grid if c.spec.mode == "ssd"]
    assert ssd and all(2 <= s.k <= 4 and s.budget <= 32 and s.backup == "fast" and s.batch_size == 4 for s in ssd)
    assert {s.draft_devices for s in ssd} == {1, 2}
    assert {c.shape for c in grid if c.spec.mode == "ssd"} == {"uniform", "geometric", "exact"}
    assert [c.spec.k for c in grid if c.spec.mode == "sd"] == [2, 3, 4]
    assert sum(c.spec.mode == "ar" for c in grid) == 1
    for c in grid:
        if c.shape == "exact":
            assert sum(c.spec.fanout) <= c.spec.budget and len(c.spec.fanout) == c.spec.k + 1


def test_exact_after_fast_backup_puts_budget_at_zero():
    primary, after = exact_schedules(toy_profile(), 4, [20], 0.0, 1.0, "fast")[20]
    assert after == (20, 0, 0, 0, 0)
    assert sum(primary) == 20 and primary[0] < 20
    _, after_neural = exact_schedules(toy_profile(), 4, [20], 0.0, 1.0, "neural")[20]
    assert after_neural == primary  # same law for backup speculations in this profile


def test_exact_schedules_match_brute_force():
    prof = toy_profile(alpha=0.75).with_(hits=HitCurve.power_law(0.875, 1.0, c_backup=0.5, r_backup=0.6))
    for budget in (2, 5, 9):
        sched = exact_schedules(prof, 3, [budget], 0.0, 1.0, "neural")[budget]
        pmf = prof.acceptance.length_pmf(3)
        for fan, backup in zip(sched, (False, True)):
            value, _ = brute_force_fanout(pmf, lambda f, k, b=backup: prof.hits.miss(f, k, 0.0, b), budget)
            assert sum(pmf[k] * prof.hits.miss(fan[k], k, 0.0, backup) for k in range(4)) == pytest.approx(value)


@pytest.mark.parametrize("field, kw", [
    ("constraints.k_range", dict(k_range=(5, 2))),
    ("constraints.k_range[0]", dict(k_range=(0, 3))),
    ("constraints.k_range", dict(k_range=4)),
    ("constraints.max_budget", dict(max_budget=0)),
    ("constraints.max_draft_devices", dict(max_draft_devices=1.5)),
    ("constraints.target_devices", dict(target_devices=0)),
    ("constraints.modes", dict(modes=("ssd", "turbo"))),
    ("constraints.modes", dict(modes=())),
    ("constraints.backups", dict(backups="neural")),
    ("constraints.batch_sizes[1]", dict(batch_sizes=(1, -2))),
    ("constraints.top_n", dict(top_n=0)),
])
def test_bad_constraints_name_the_field(field, kw):
    with pytest.raises(ConfigError) as e:
        Constraints(**kw)
    assert e.value.field == field and "allowed" in str(e.value)


def test_constraints_from_dict_round_trip_and_unknown_key():
    c = Constraints(k_range=(2, 6), modes=("sd", "ssd"), batch_sizes=(8, 1, 8))
    assert c.batch_sizes == (1, 8)
    assert Constraints.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match="constraints.max_k"):
        Constraints.from_dict({"max_k": 3})


@pytest.mark.parametrize("field, kw", [("objective", dict(objective="speed")), ("batch_size", dict(batch_size=0)),
                                       ("temperature", dict(temperature=-1.0)),
                                       ("constraints", dict(constraints={"k_range": (1, 2)}))])
def test_bad_arguments(field, kw):
    with pytest.raises(ConfigError) as e:
        run(toy_profile(), **kw)
    assert e.value.field == field


def test_best_dominates_confirmed_and_baselines():
    plan = run(toy_profile(), constraints=Constraints(top_n=5))
    best = plan.table[0]
    assert plan.best.mode == best["mode"] == "ssd"
    assert len(plan.table) >= 5
    assert all(best["tokens_per_s_per_seq"] >= r["tokens_per_s_per_seq"] for r in plan.table)
    for base in plan.baselines.values():
        assert best["tokens_per_s_per_seq"] >= base["tokens_per_s_per_seq"]
    assert plan.baselines["ar"]["speedup_vs_ar"] == pytest.approx(1.0)
    assert best["speedup_vs_sd"] > 1.0 and best["speedup_vs_ar"] > best["speedup_vs_sd"]
    assert [r["rank"] for r in plan.table] == list(range(1, len(plan.table) + 1))
    assert plan.searched > 500 and "best:" in plan.summary()


def test_constraints_are_honoured_by_the_plan():
    cons = Constraints(k_range=(1, 3), max_budget=12, modes=("ssd",), backups=("fast",), top_n=3)
    plan = run(toy_profile(), batch_size=8, constraints=cons)
    assert all(r["mode"] == "ssd" and r["backup"] == "fast" and r["k"] <= 3 and r["budget"] <= 12
               for r in plan.table)
    assert plan.best.mode == "ssd" and plan.best.k <= 3 and plan.best.batch_size == 8
    assert set(plan.baselines) == {"ar", "sd"}  # still reported for comparison


def test_throughput_objective_counts_draft_devices():
    prof = toy_profile(provenance={"target_devices": 4})
    spec = SpecConfig(mode="ssd", k=4, draft_devices=2)
    assert devices_used(spec, 4) == 6 and devices_used(spec.replace(mode="sd"), 4) == 4
    plan = run(prof, objective="throughput", constraints=Constraints(max_draft_devices=3))
    for r in plan.table:
        assert r["devices"] == 4 + (r["draft_devices"] if r["mode"] == "ssd" else 0)
        assert r["throughput_per_device"] == pytest.approx(r["throughput"] / r["devices"])
    values = [r["throughput_per_device"] for r in plan.table]
    assert values == sorted(values, reverse=True)
    assert plan.table[0]["objective"] == values[0]


def test_pareto_spans_batch_sizes():
    prof = toy_profile(target_per_token=0.0005, per_token=0.00002)
    plan = run(prof, constraints=Constraints(batch_sizes=(1, 4, 16), top_n=3))
    sizes = {r["batch_size"] for r in plan.pareto}
    assert 1 in sizes and 16 in sizes
    assert all(r["batch_size"] == 1 for r in plan.table)
    xs = [r["tokens_per_s_per_seq"] for r in plan.pareto]
    ys = [r["throughput_per_device"] for r in plan.pareto]
    assert xs == sorted(xs, reverse=True) and ys == sorted(ys)
    import json
    json.dumps(plan.to_dict())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=12))
def test_pareto_front_matches_brute_force(points):
    rows = [{"tokens_per_s_per_seq": x, "throughput_per_device": y} for x, y in points]
    front = pareto_front(rows)
    pts = {(r["tokens_per_s_per_seq"], r["throughput_per_device"]) for r in front}
    expect = {p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in points)}
    assert pts == expect and len(front) == len(pts)


def test_confirm_workload_keeps_mean_context():
    wl = confirm_workload(Workload(num_sequences=100, output_tokens=1024, prompt_tokens=128), 16)
    assert (wl.num_sequences, wl.output_tokens) == (64, 256)
    assert wl.prompt_tokens + wl.output_tokens / 2 == 128 + 1024 / 2
    assert confirm_workload(Workload(num_sequences=100, output_tokens=1024), 1).num_sequences == 32  # 8192 tokens
    mid = Workload(num_sequences=8, output_tokens=1024)  # 8192 tokens: enough, simulated as is
    assert confirm_workload(mid, 8) == mid
    small = Workload(num_sequences=4, output_tokens=128, prompt_tokens=46)  # 512 tokens: repeated 16 times
    assert confirm_workload(small, 1) == Workload(num_sequences=64, output_tokens=128, prompt_tokens=46)
    odd = Workload(num_sequences=3, output_tokens=100)  # 300 tokens: 28 copies reach 8400 >= 8192
    assert confirm_workload(odd, 2).num_sequences == 84


def test_search_is_exhaustive_over_small_grid():
    cons = Constraints(k_range=(1, 2), max_budget=6, top_n=1000)
    prof = toy_profile()
    plan = run(prof, constraints=cons)
    grid = candidates(prof, 1, 0.0, cons)
    brute = max(toy_predict(prof, c.spec, confirm_workload(WL, 1)).tokens_per_s_per_seq for c in grid)
    assert plan.table[0]["tokens_per_s_per_seq"] == pytest.approx(brute)
    distinct = {(c.spec.mode, c.spec.k, c.spec.budget, c.spec.backup, resolve_fanouts(prof, c.spec)) for c in grid}
    assert len(plan.table) == len(distinct)  # every distinct deployment confirmed once
    for a, b in itertools.pairwise(plan.table):
        assert a["objective"] >= b["objective"]
