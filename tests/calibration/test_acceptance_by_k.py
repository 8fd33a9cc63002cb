"""AcceptanceModel.by_k: the rates at a lookahead K the calibration did not measure, and that every consumer
(closed forms, simulator, optimizer's memo) reads the same ones."""

from __future__ import annotations

import numpy as np
import pytest

from calibration import AcceptanceModel, HitCurve, LatencyModel, Profile, load_preset
from saguaro_sim import SpecConfig, Workload, simulate
from saguaro_sim.analytic import predict
from saguaro_sim.search import memoized

K2, K4, K8 = (0.9, 0.8), (0.7, 0.75, 0.85, 0.95), (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
DEFAULT = (0.5,)
MODEL = AcceptanceModel({0.0: DEFAULT}, by_k={0.0: {2: K2, 4: K4, 8: K8}})


@pytest.mark.parametrize("k, table", [(2, K2), (4, K4), (8, K8)])
def test_measured_k_reads_its_own_table(k, table):
    assert MODEL.rates(k, 0.0) == pytest.approx(table, abs=1e-12)


def test_between_two_measured_k_blends_them_by_distance_positions_past_the_short_one_from_the_long():
    want3 = (0.5 * 0.9 + 0.5 * 0.7, 0.5 * 0.8 + 0.5 * 0.75, 0.85)      # halfway from K = 2 to K = 4
    assert MODEL.rates(3, 0.0) == pytest.approx(want3, abs=1e-12)
    w = 1 / 4                                                          # K = 5: a quarter of the way from 4 to 8
    want5 = [(1 - w) * a + w * b for a, b in zip(K4, K8)] + [K8[4]]
    assert MODEL.rates(5, 0.0) == pytest.approx(want5, abs=1e-12)
    want7 = [0.25 * a + 0.75 * b for a, b in zip(K4, K8)] + list(K8[4:7])
    assert MODEL.rates(7, 0.0) == pytest.approx(want7, abs=1e-12)
    # tokens per round lie between the two neighbours' tables read at that K (truncated / stretched)
    lo = AcceptanceModel({0.0: K8[:5]}).expected_tokens(5, 0.0)
    hi = AcceptanceModel({0.0: K4}).expected_tokens(5, 0.0)
    assert min(lo, hi) < MODEL.expected_tokens(5, 0.0) < max(lo, hi)


def test_outside_the_measured_range_unchanged_nearest_end():
    assert MODEL.rates(1, 0.0) == pytest.approx(K2[:1], abs=1e-12)             # below: smallest, truncated
    assert MODEL.rates(12, 0.0) == pytest.approx(K8 + (K8[-1],) * 4, abs=1e-12)  # above: largest, last repeated
    one = AcceptanceModel({0.0: DEFAULT}, by_k={0.0: {4: K4}})
    assert one.rates(2, 0.0) == pytest.approx(K4[:2]) and one.rates(6, 0.0) == pytest.approx(K4 + (0.95,) * 2)
    # a temperature with no by_k reads by_temperature; one with by_k never does
    bare = AcceptanceModel({0.0: DEFAULT, 1.0: (0.3, 0.4)}, by_k={0.0: {2: K2, 4: K4}})
    assert bare.rates(3, 1.0) == pytest.approx((0.3, 0.4, 0.4))
    assert bare.rates(3, 0.0) == pytest.approx(MODEL.rates(3, 0.0))


def test_hand_written_tables_of_other_lengths():
    """A table shorter than its K repeats its last rate; the blend still takes positions past the short one's
    table from the long one's."""
    m = AcceptanceModel({0.0: DEFAULT}, by_k={0.0: {2: (0.9,), 6: (0.6, 0.7)}})
    assert m.rates(4, 0.0) == pytest.approx((0.5 * 0.9 + 0.5 * 0.6, 0.7, 0.7, 0.7))


def test_temperature_and_c_applied_after_the_k_rule():
    m = AcceptanceModel({0.0: DEFAULT, 1.0: DEFAULT}, c_effect={0.5: 0.9},
                        by_k={0.0: {2: K2, 4: K4}, 1.0: {2: (0.5, 0.5), 4: (0.3,) * 4}})
    at0, at1 = m.rates(3, 0.0), m.rates(3, 1.0)
    assert at1 == pytest.approx((0.4, 0.4, 0.3))
    assert m.rates(3, 0.5) == pytest.approx(0.5 * at0 + 0.5 * at1)
    assert m.rates(3, 0.0, sampler_c=0.5) == pytest.approx(0.9 * at0)
    assert AcceptanceModel.from_dict(m.to_dict()) == m


def _profile(acc: AcceptanceModel) -> Profile:
    lat = LatencyModel.linear(base=0.002, per_token=2e-5, per_context=1e-7)
    return Profile(name="byk", target=lat, draft=LatencyModel.linear(base=0.0004, per_token=1e-5, per_context=0.0),
                   link_s=0.0, acceptance=acc, hits=HitCurve.power_law(0.3, 0.5))


def test_closed_forms_simulator_and_memo_read_the_same_rates_at_an_unmeasured_k():
    """SD at K = 3 (between the measured 2 and 4): the closed form's tokens per round and the simulator's
    long-run mean are AcceptanceModel.expected_tokens(3) of the blended rates, not either neighbour's; SSD's
    prediction and simulation equal those of a profile holding the blended table alone."""
    p = _profile(MODEL)
    want = MODEL.expected_tokens(3, 0.0)
    wl = Workload(num_sequences=64, output_tokens=400, prompt_tokens=32)
    sd = SpecConfig(mode="sd", k=3)
    assert predict(p, sd, wl).tokens_per_round == pytest.approx(want, rel=1e-9)
    # ~8700 rounds of sd ~1 token: the mean's sd ~0.4%; the neighbours' tables are 8% / 10% away
    assert simulate(p, sd, wl, seed=1).tokens_per_round == pytest.approx(want, rel=0.02)
    for other in (AcceptanceModel({0.0: K2}).expected_tokens(3), AcceptanceModel({0.0: K4}).expected_tokens(3)):
        assert abs(other / want - 1) > 0.07
    flat = _profile(AcceptanceModel({0.0: tuple(MODEL.rates(3, 0.0))}))
    ssd = SpecConfig(mode="ssd", k=3, budget=12)
    assert predict(p, ssd, wl) == predict(flat, ssd, wl)
    assert simulate(p, ssd, wl, seed=2).to_dict() | {"wall_s": 0} == simulate(flat, ssd, wl, seed=2).to_dict() | {
        "wall_s": 0}
    assert np.array_equal(memoized(p).acceptance.rates(3, 0.0), MODEL.rates(3, 0.0))


def test_shipped_profile_measured_k_unchanged_and_unmeasured_between_neighbours():
    acc = load_preset("cpu-tinypair").acceptance
    for t, ks in acc.by_k.items():
        for k, table in ks.items():
            assert acc.rates(k, t) == pytest.approx(table[:k], abs=1e-12)
        ordered = sorted(ks)
        for lo, hi in zip(ordered, ordered[1:]):
            for k in range(lo + 1, hi):
                r = acc.rates(k, t)
                assert len(r) == k
                for i in range(k):
                    a, b = sorted((ks[lo][i] if i < lo else ks[hi][i], ks[hi][i]))
                    assert a - 1e-12 <= r[i] <= b + 1e-12
