"""Executor overheads as planes in the batch width and the new tokens per row (calibration/overheads.plane):
fitted back from synthetic SSD rounds with known truth at the calibration grid's shapes, then extrapolated to
shapes the fit did not see; a single curve over total tokens cannot do either. The draft's own round is fitted
from every push run of the same regime (T = 0 or T > 0), whatever its temperature."""

from __future__ import annotations

import numpy as np
import pytest

from calibration import AcceptanceModel, HitCurve, LatencyModel, Measurements, Profile
from calibration.fit import run_of, same_regime
from calibration.fit_acceptance import RunRounds
from calibration.fit_executor import fit_executor_costs
from calibration.overheads import ExecutorCosts, plane
from saguaro_sim import SpecConfig
from saguaro_sim.costs import RoundCosts
from saguaro_sim.resolve import resolve

ZERO = LatencyModel.constant(0.0)
# (K, width, budget) of the calibration set's SSD runs (bench/fidelity_configs.CALIBRATION): widths 1, 2, 4
SHAPES = ((2, 1, 6), (8, 1, 32), (6, 2, 24), (4, 4, 12))


def _fan(k: int, budget: int) -> tuple[int, ...]:
    fan = [budget // (k + 1)] * (k + 1)
    fan[0] += budget - sum(fan)
    return tuple(fan)


def _run(k: int, width: int, budget: int, verify, tree, t: float = 0.0, seed: int = 0, noise: float = 0.02
         ) -> RunRounds:
    """Steady SSD rounds whose verify (K + 1 per row) and tree steps (`budget` branches per row) cost
    verify(width, K + 1) and tree(width, budget) seconds, times a log-normal jitter of `noise`."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(60):
        j = float(np.exp(rng.normal(0.0, noise)))
        rows.append({"batch_index": 0, "round": i, "t0": 0.0, "t1": 0.0, "batch": width, "width": width,
                     "accepted": [0] * width, "from_backup": [False] * width, "context": [10] * width,
                     "verify_s": j * verify(width, k + 1), "glue_s": 5e-4, "fork_s": 3e-4,
                     "tree_s": j * k * tree(width, budget)})
    return RunRounds(k=k, temperature=t, sampler_c=1.0, mode="ssd", budget=budget, fanout=_fan(k, budget), rounds=rows)


def _fit(verify, tree, t: float = 0.0) -> ExecutorCosts:
    runs = [_run(k, w, bud, verify, tree, t, seed=i) for i, (k, w, bud) in enumerate(SHAPES)]
    return fit_executor_costs(ZERO, ZERO, runs, mode="ssd")[0]


def test_verify_per_position_and_per_row_fitted_back_and_extrapolated():
    """Truth: 0.45 ms + 0.05 ms per verified position (once for the batch) + 0.045 ms per row, no per-token
    term (about what session 6's calibration runs show). The plane is recovered; it charges K = 3 at width 1
    and K = 3 at width 8 within 3%, where the old line over total tokens (fitted to the same per-shape means)
    has under half the true cost per verified position at width 1 (K = 8 over K = 2 charged too little).
    Power: 2% per-round jitter, 60 rounds per shape: the tolerances below hold for 19 of 20 seeds (seeds fixed)."""
    truth = (4.5e-4, 0.0, 4.5e-5, 5e-5)
    costs = _fit(lambda b, n: plane(truth, b, n), lambda b, n: 3e-4)
    line = costs.lines["greedy"]["verify"]
    assert line[0] == pytest.approx(truth[0], abs=5e-5)
    assert line[2] == pytest.approx(truth[2], abs=1e-5) and line[3] == pytest.approx(truth[3], abs=5e-6)
    assert line[1] == pytest.approx(0.0, abs=2e-6)
    for b, n in ((1, 4), (1, 9), (8, 4), (3, 6)):
        assert costs("verify", b, n) == pytest.approx(plane(truth, b, n), rel=0.03), (b, n)
    xs = np.asarray([w * (k + 1) for k, w, _ in SHAPES], float)     # the old form: base + slope * b * n
    slope, base = np.polyfit(xs, [plane(truth, w, k + 1) for k, w, _ in SHAPES], 1)
    assert slope < 0.5 * truth[3] and line[3] + line[1] == pytest.approx(truth[3], rel=0.1)


def test_per_token_truth_stays_per_token():
    """Truth 0.2 ms + 0.02 ms per row-token (width x K + 1): the fit puts it in the per-token term, not in the
    per-row or per-position ones."""
    truth = (2e-4, 2e-5, 0.0, 0.0)
    costs = _fit(lambda b, n: plane(truth, b, n), lambda b, n: 3e-4)
    line = costs.lines["greedy"]["verify"]
    assert line[1] == pytest.approx(2e-5, rel=0.05) and line[2] < 2e-6 and line[3] < 2e-6
    assert costs("verify", 8, 4) == pytest.approx(plane(truth, 8, 4), rel=0.03)


def test_sampled_tree_step_per_row_extrapolated_to_width_8_and_charged_by_the_build():
    """Sampled tree steps: 0.32 ms + 0.045 ms per row, flat in the branches (the shapes' total tokens 6..48 say
    nothing one line could hold: width 4 x 12 branches is slower than width 1 x 32). Fitted back at widths 1, 2,
    4; charged at width 8 by RoundCosts.build, K tree steps of it."""
    truth = (3.2e-4, 0.0, 4.5e-5, 0.0)
    costs = _fit(lambda b, n: 1e-3, lambda b, n: plane(truth, b, n), t=0.7)
    assert costs("tree_step", 8, 12, 0.7) == pytest.approx(plane(truth, 8, 12), rel=0.03)
    assert costs("tree_step", 1, 64, 0.7) == pytest.approx(plane(truth, 1, 64), rel=0.03)
    tiny = LatencyModel.constant(1e-6)
    p = Profile(name="planes", target=tiny, draft=tiny, link_s=0.0, acceptance=AcceptanceModel.geometric(0.7),
                hits=HitCurve.power_law(0.2, 0.5), executor=costs)
    spec = SpecConfig(mode="ssd", k=3, fanout=(6, 3, 2, 1), temperature=0.7, batch_size=8)
    c = RoundCosts(p, spec, resolve(spec, p))
    want = 1e-6 + costs("glue", 8, 4, 0.7) + costs("fork", 8, 4, 0.7) + 3 * (1e-6 + costs("tree_step", 8, 12, 0.7))
    assert c.build(8, 10.0, 12) == pytest.approx(want, rel=1e-9)


def test_two_number_lines_of_older_profiles_still_load_and_charge_per_token():
    old = ExecutorCosts.from_dict({"lines": {"greedy": {"verify": [1e-3, 1e-4]}}})
    assert old("verify", 4, 3) == pytest.approx(1e-3 + 1e-4 * 12)
    new = ExecutorCosts.from_dict(old.to_dict() | {"lines": {"greedy": {"verify": [1e-3, 0.0, 2e-4, 1e-4]}}})
    assert new("verify", 4, 3) == pytest.approx(1e-3 + 2e-4 * 4 + 1e-4 * 3)
    from calibration.errors import ConfigError
    with pytest.raises(ConfigError, match=r"profile.executor.lines.greedy.verify"):
        ExecutorCosts.from_dict({"lines": {"greedy": {"verify": [1e-3, 0.0, 2e-4]}}})


def _push(t: float, width: int, k: int = 2) -> Measurements:
    spec = {"mode": "ssd", "k": k, "temperature": t, "batch_size": width}
    return Measurements(meta={"spec": spec, "ssd_protocol": "push", "fanout": [2, 1, 1]},
                        rounds=[{"round": 0, "batch": width, "accepted": [0] * width}])


def test_draft_round_pools_every_push_run_of_the_regime():
    """T = 0.7 gets the sampled push runs at T = 0.7 and T = 1.0 (the width-4 lever arm), not the greedy ones;
    T = 0 the greedy ones only."""
    runs = [run_of(_push(t, w)) for t, w in ((0.0, 1), (0.7, 1), (1.0, 4), (0.0, 4))]
    assert [(r.temperature, len(r.rounds[0]["accepted"])) for r in same_regime(runs, 0.7)] == [(0.7, 1), (1.0, 4)]
    assert [r.temperature for r in same_regime(runs, 0.0)] == [0.0, 0.0]
