"""Stack levels of the roofline: fitted terms, cross-validated error, tree-width costs, acceptance length input."""

import math

import pytest

from calibration import AcceptanceModel, ConfigError, LatencyModel, roofline
from calibration.roofline import roofline_params
from calibration.stack import FITTED, STACKS, get_stack
from calibration.stack_fit import cross_validate, fit_level, median_abs_error, predict
from calibration.stack_points import POINTS

TARGET_ERROR = 0.15  # issue 14: median error on held-out measured points, per level


@pytest.mark.parametrize("level", ["serving", "saguaro"])
def test_shipped_constants_are_the_fit(level):
    fitted, shipped = fit_level(level), STACKS[level]
    for key in FITTED:
        assert getattr(shipped, key) == pytest.approx(getattr(fitted, key), rel=2e-3, abs=1e-12), key


@pytest.mark.parametrize("level", ["serving", "saguaro"])
def test_held_out_error_under_target(level):
    rows = cross_validate(level)
    groups = {p.group for p in POINTS[level] if p.kind != "delta"}
    assert {r["group"] for r in rows if r["kind"] != "delta"} == groups and len(groups) >= 4
    assert median_abs_error(rows) <= TARGET_ERROR
    # the in-sample fit is at least as good as the held-out prediction
    st = STACKS[level]
    in_sample = sorted(abs(predict(p, st) / p.measured_s - 1) for p in POINTS[level] if p.kind != "delta")
    assert in_sample[len(in_sample) // 2] <= median_abs_error(rows) + 1e-9


def test_saguaro_level_reproduces_the_h200_gap_the_bound_misses():
    bound, sag = (roofline("h200", "llama-3.1-8b", 1, "llama-3.2-1b", stack=s) for s in ("bound", "saguaro"))
    assert bound.target(1, 1, 1024) == pytest.approx(4.70e-3, rel=0.01)  # the old preset (docs/BENCHMARKS.md)
    assert sag.target(1, 1, 1024) == pytest.approx(7.345e-3, rel=0.05)   # measured, CUDA graphs
    assert sag.draft(1, 1, 1024) == pytest.approx(2.315e-3, rel=0.05)
    # launch-bound draft: its cost ratio to the target is far above the parameter ratio (0.15)
    assert sag.draft(1, 1, 1024) / sag.target(1, 1, 1024) > 0.25
    assert STACKS["saguaro"].layer_s > 2 * STACKS["serving"].layer_s


@pytest.mark.parametrize("level", ["serving", "saguaro"])
def test_wide_tree_steps_cost_more_than_one_token(level):
    p = roofline("h100", "llama-3.1-70b", 4, "llama-3.2-1b", stack=level)
    d1, d256 = p.draft(1, 1, 1024), p.draft(1, 256, 1024)
    assert d256 > 1.3 * d1
    # growing with branches x context: the same width over a 4x longer context costs more again
    assert p.draft(1, 256, 4096) > d256
    assert p.draft(4, 256, 1024) > d256
    # verification widths: a K+1 = 8 verify costs more than a decode step, but far less than 8 of them
    assert p.target(1, 1, 1024) < p.target(1, 8, 1024) < 2 * p.target(1, 1, 1024)


def test_tensor_parallel_all_reduce_latency_per_layer():
    one = roofline_params("h100", "llama-3.1-70b", 1, stack="serving")
    four = roofline_params("h100", "llama-3.1-70b", 4, stack="serving")
    assert one["comm_base_s"] == 0.0
    assert four["comm_base_s"] == pytest.approx(2 * 80 * STACKS["serving"].allreduce_s)


def test_old_roofline_profiles_load_and_evaluate_unchanged():
    params = roofline_params("h100", "llama-3.1-8b", 1)  # stack None: the bare bound, no stack keys
    assert not {"token_s", "multi_token_s", "score_bytes_per_qk", "flops_efficiency"} & set(params)
    lat = LatencyModel.from_dict({"kind": "roofline", "params": params})
    assert lat(4, 8, 512) == LatencyModel("roofline", roofline_params("h100", "llama-3.1-8b", 1, stack="bound"))(
        4, 8, 512)


def test_unknown_stack_is_a_config_error():
    with pytest.raises(ConfigError, match="stack"):
        roofline("h100", "llama-3.1-8b", 1, "llama-3.2-1b", stack="turbo")
    assert get_stack("Serving") is STACKS["serving"]


@pytest.mark.parametrize("al,k", [(1.5, 1), (3.0, 4), (4.2, 6), (6.9, 7), (1.0001, 3)])
def test_from_acceptance_length_round_trips(al, k):
    m = AcceptanceModel.from_acceptance_length(al, k)
    assert m.expected_tokens(k) == pytest.approx(al, rel=1e-9)
    a = m.mean_alpha(k)
    assert (1 - a ** (k + 1)) / (1 - a) == pytest.approx(al, rel=1e-9)


@pytest.mark.parametrize("al", [1.0, 5.0, 7.5, -2, math.nan, "3", True])
def test_from_acceptance_length_out_of_range(al):
    with pytest.raises(ConfigError) as e:
        AcceptanceModel.from_acceptance_length(al, 4)
    assert e.value.field == "acceptance_length" and "(1, 5)" in str(e.value)
