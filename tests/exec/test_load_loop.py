"""The executor's load loop between rounds: the refill skips its work on rounds where nothing finished or arrived
into a free slot (state.needs_refill), and what the loop still spends between rounds is fitted as the profile's
``loop`` line (calibration/fit_loop.py), which the load simulator charges AR and SD rounds."""

import dataclasses
import json

import numpy as np
import pytest
from exec_helpers import tiny_models

from calibration import LatencyModel, Profile
from calibration.fit import run_of
from calibration.fit_loop import fit_loop, loop_gaps
from calibration.fit_prefill import with_prefill
from saguaro_exec import RunConfig, run
from saguaro_exec.engine.refill import refill
from saguaro_exec.engine.state import BatchState
from saguaro_sim import SpecConfig
from saguaro_sim.load import RequestStream, simulate_load
from saguaro_sim.load.costs import round_cost

TARGET, DRAFT = tiny_models()
BARE = Profile(name="bare", target=LatencyModel.constant(1e-3), draft=LatencyModel.constant(1e-4))
AR = SpecConfig(mode="ar", k=0, budget=0)


class CountingState(BatchState):
    calls = 0

    def refill(self, now_s, movable=True):
        self.calls += 1
        return super().refill(now_s, movable)


class Side:
    class runner:
        movable = True

    def apply_refill(self, moves, admitted):
        pass


def test_refill_does_nothing_while_every_row_is_live_and_nobody_waits():
    st = CountingState([[1, 2], [3, 4], [5, 6]], 3, [], width=2, arrivals=[0.0, 0.0, 10.0])
    assert st.needs_refill(0.0)                                  # empty: fill it
    refill(st, [Side()], lambda: 0.0, 0)
    assert st.calls == 1 and len(st) == 2 and not st.needs_refill(20.0)   # full, all live
    refill(st, [Side()], lambda: 20.0, 1)
    assert st.calls == 1                                         # skipped
    st.append(0, [7, 8, 9], 1)                                   # row 0 finishes: its slot takes request 2
    assert st.needs_refill(20.0)
    extra, _ = refill(st, [Side()], lambda: 20.0, 2)
    assert st.calls == 2 and extra["refill"] == [2]
    half = BatchState([[1, 2], [3, 4]], 3, [], width=2, arrivals=[0.0, 5.0])
    refill(half, [Side()], lambda: 0.0, 0)
    assert len(half) == 1 and not half.needs_refill(1.0) and half.needs_refill(5.0)   # a free slot, an arrival


def test_the_loop_line_is_fitted_from_a_run_and_charged_under_load():
    rep = run(RunConfig(spec=AR.replace(batch_size=2), target=TARGET, draft=DRAFT, prompts=[[1, 2, 3]] * 4,
                        max_new_tokens=12))
    rr = run_of(rep.measurements)
    gaps = loop_gaps(rr)
    assert len(gaps) >= 10 and all(g >= 0 for _, g in gaps)
    lines, info = fit_loop([rr])
    assert lines["loop"][0] + 2 * lines["loop"][1] > 0 and info["n"] == len(gaps)
    prof = dataclasses.replace(BARE, executor=with_prefill(None, {"loop": [2e-4, 1e-4]}))
    cost = round_cost(prof, AR, 2, 10.0, False)
    assert cost.loop_s == pytest.approx(4e-4) and cost.base_s == pytest.approx(1e-3 + 4e-4)
    assert round_cost(prof, SpecConfig(mode="ssd", k=2, budget=4), 2, 10.0, False).loop_s == 0.0
    one = RequestStream(np.zeros(1), np.array([1]), np.array([101]))                       # no prefill: 101 rounds of step + loop
    assert simulate_load(prof, AR, one, max_batch=1).sim_time_s == pytest.approx(101 * (1e-3 + 3e-4))
    assert simulate_load(BARE, AR, one, max_batch=1).sim_time_s == pytest.approx(101 * 1e-3)


def test_calibration_fit_gives_the_profile_its_prefill_and_loop_lines():
    from calibration import Measurements, load_preset
    from calibration.fit import fit

    grid = [{"who": who, "batch": b, "new_tokens": n, "context": c, "median_s": s0 * (1 + 0.01 * b * n) + 1e-8 * c,
             "p10_s": 0.0, "p90_s": 0.0, "n": 3} for who, s0 in (("target", 1e-3), ("draft", 1e-4))
            for b in (1, 2) for n in (1, 3, 8) for c in (16, 64)]
    runs = [run(RunConfig(spec=SpecConfig(mode=m, k=2 if m == "sd" else 0, budget=0, batch_size=2), target=TARGET,
                          draft=DRAFT, prompts=[[1, 2, 3, 4, 5], [2, 3, 4], [3, 4, 5, 6], [4, 5]], max_new_tokens=6)
                ).measurements for m in ("ar", "sd")]
    prof = fit(Measurements(latency=grid), *runs, base=load_preset("cpu-tinypair"))
    lines = prof.executor.lines["greedy"]
    assert {"prefill", "draft_prefill", "loop"} <= set(lines)
    assert prof.provenance["loop_fit"]["n"] > 0 and prof.provenance["prefill_fit"]["prefill"]["n"] >= 2


def test_calibration_fits_after_idle_from_load_mode_runs_only(tmp_path):
    """A load-mode run (a trace of requests 200 ms apart, each decoding in 5-25 ms, ~100 ms on a loaded CI box)
    sits idle between them: run_of marks it, and calibration.fit reads its idle gaps into executor.after_idle (the
    shares, whatever this machine's cold start is, are >= 0); a fixed-batch run of several batches has no idle gap
    to read. A trace, not a Poisson stream: at 20/s a slow box's requests overlapped and left 1 gap (CI, 2026-12-04)."""
    from calibration import Measurements, load_preset
    from calibration.fit import fit

    grid = [{"who": who, "batch": b, "new_tokens": n, "context": c, "median_s": s0 * (1 + 0.01 * b * n) + 1e-8 * c,
             "p10_s": 0.0, "p90_s": 0.0, "n": 3} for who, s0 in (("target", 1e-3), ("draft", 1e-4))
            for b in (1, 2) for n in (1, 3, 8) for c in (16, 64)]
    spec = AR.replace(batch_size=2)
    prompts = [[1, 2, 3, 4, 5], [2, 3, 4], [3, 4, 5, 6], [4, 5]] * 2
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": 0.2 * i, "prompt_tokens": len(p), "output_tokens": 24}) + "\n"
                             for i, p in enumerate(prompts)))
    loaded = run(RunConfig(spec=spec, target=TARGET, draft=DRAFT, prompts=prompts, max_new_tokens=24,
                           arrivals={"trace": str(trace)})).measurements
    fixed = run(RunConfig(spec=spec, target=TARGET, draft=DRAFT, prompts=prompts, max_new_tokens=24)).measurements
    assert run_of(loaded).load and not run_of(fixed).load
    base = load_preset("cpu-tinypair")
    prof = fit(Measurements(latency=grid), loaded, base=base)
    info = prof.provenance["after_idle"]
    assert info["idle_gaps"] >= 3 and all(e >= 0 for e in prof.executor.after_idle)
    assert len(prof.executor.after_idle) <= len(info["samples"])
    none = fit(Measurements(latency=grid), fixed, base=base)
    assert none.provenance["after_idle"]["idle_gaps"] == 0 and none.executor.after_idle == ()
