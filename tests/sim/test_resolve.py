"""One resolver: the executor runs the configuration the planner resolved (fan-outs, backup, protocol, tree)."""

from __future__ import annotations

import itertools

import pytest

from calibration import ConfigError
from calibration.profile import list_presets, load_preset
from saguaro_sim import SpecConfig, Workload, resolve, simulate
from saguaro_sim.analytic import predict

GRID = [SpecConfig(mode="ssd", k=k, budget=budget, fanout_shape=shape, backup="auto", batch_size=b, temperature=t)
        for k, budget, shape, b, t in itertools.product((2, 6), (8, 32), ("geometric", "uniform"), (1, 2, 4, 8),
                                                        (0.0, 0.7))]


@pytest.mark.parametrize("preset", list_presets())
def test_executor_resolves_every_spec_as_the_simulator_does(preset):
    """For every shipped profile and a grid of specs (k, budget, shape, backup auto at batch 1/2/4/8, T), the
    executor's resolution (saguaro_exec.run.resolve_run, what run() executes and records) equals what
    simulate and the closed forms used."""
    from saguaro_exec import RunConfig
    from saguaro_exec.run import resolve_run

    profile = load_preset(preset)
    backups = set()
    for spec in GRID:
        ran, how = resolve_run(RunConfig(spec=spec, profile=preset))
        sim = simulate(profile, spec, Workload(num_sequences=spec.batch_size, output_tokens=4), seed=0)
        assert sim.resolved == ran.to_dict(), (preset, spec)
        assert predict(profile, spec, Workload()).backup == ran.backup
        assert sum(ran.tree_width) == max(sum(ran.fanout), sum(ran.fanout_miss))
        assert sum(ran.fanout) == spec.budget and how == f"profile {preset!r} (given)"
        backups.add(ran.backup)
    assert backups <= {"neural", "fast"}


def test_real_run_records_the_resolved_spec_and_the_default_profile():
    """A real SSD run with no profile resolves with the stated default and executes those fan-outs; the
    RunReport, its summary (the --json output) and measurements.meta all carry `resolved`."""
    import saguaro_exec
    from saguaro_sim.resolve import DEFAULT_PROFILE

    spec = SpecConfig(mode="ssd", k=3, budget=10, backup="auto", batch_size=2, temperature=0.7)
    rep = saguaro_exec.run(saguaro_exec.RunConfig(spec=spec, prompts=["the cat", "a dog"], max_new_tokens=6))
    want = resolve(spec, load_preset(DEFAULT_PROFILE)).to_dict()
    meta = rep.measurements.meta
    assert rep.resolved == want and rep.summary()["resolved"] == want and meta["resolved"] == want
    assert meta["fanout"] == want["fanout"] and meta["backup_resolved"] == want["backup"]
    assert meta["ssd_protocol"] == want["protocol"] and "default profile" in meta["resolved_with"]
    assert set(want) >= {"fanout", "fanout_miss", "backup", "protocol", "tree_width"}


def test_resolver_settles_every_open_choice():
    p = load_preset("cpu-tinypair")
    two = resolve(SpecConfig(mode="ssd", k=4, budget=13, draft_devices=2), p)
    assert two.tree_width == (7, 6) and sum(two.fanout) == 13
    miss = resolve(SpecConfig(mode="ssd", k=2, fanout=(2, 1, 1), fanout_miss=(4, 1, 1), budget=6), p)
    assert miss.branches == 6 and miss.tree_width == (6,)
    assert resolve(SpecConfig(mode="ar", k=0), p).to_dict()["backup"] == "none"
    assert resolve(SpecConfig(mode="ssd", k=2, budget=6, temperature=0.7), p, protocol="reply").protocol == "reply"
    big = p.with_(vocab_size=200_000)            # q rows of a wide cache at T > 0: too big to push
    assert resolve(SpecConfig(mode="ssd", k=6, budget=64, temperature=1.0), big).protocol == "reply"
    with pytest.raises(ConfigError, match="^protocol:"):
        resolve(SpecConfig(), p, protocol="tcp")
    with pytest.raises(ConfigError, match="^profile:"):
        resolve(SpecConfig(), {"name": "x"})
