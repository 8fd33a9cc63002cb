"""Every engine's round rows on a one-thread CPU run carry the verifier thread's CPU time over its verification
(``verify_cpu_s``): positive, not above the wall time it was measured in, and about all of it on an idle core,
which is what lets the executor fit leave out rounds whose core was taken away (fit_executor.preempted)."""

import statistics

import pytest

from saguaro_exec import RunConfig, run
from saguaro_exec.io.assets import tiny_pair_paths
from saguaro_sim import SpecConfig

TARGET, DRAFT = map(str, tiny_pair_paths())


@pytest.mark.parametrize("spec", [SpecConfig(mode="ar", k=0), SpecConfig(mode="sd", k=3),
                                  SpecConfig(mode="ssd", k=3, fanout=(2, 2, 1, 1))], ids=lambda s: s.mode)
def test_verify_cpu_time_recorded_on_cpu(spec):
    rep = run(RunConfig(spec=spec, target=TARGET, draft=DRAFT, prompts=[[1, 2, 3], [4, 5]], max_new_tokens=24,
                        threads=1))
    rows = rep.measurements.rounds
    assert rows and all("verify_cpu_s" in r for r in rows)
    assert all(0.0 < r["verify_cpu_s"] <= r["verify_s"] + 1e-4 for r in rows)
    # the thread ran its own verification: most rounds lost (almost) nothing of the core (a 2-core CI box may
    # lend it to the draft process now and then, hence the median)
    assert statistics.median(r["verify_cpu_s"] / r["verify_s"] for r in rows) > 0.8
