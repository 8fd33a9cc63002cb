"""The calibration runs bench_load.py makes around its measurement, none of them a load run it predicts: the
fixed-batch run of the same mode beside every load run (the machine's speed now against the profile, ``--drift
beside``), the cell's drift from those or from the bare-forward probe, the light-load run per mode that fits the
slower rounds after an idle gap (``--after-idle fit``, calibration/fit_idle.py), and the speed-drift series of the
fixed-batch runs made right before the measurement (``hour_drift``)."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np

from bench.fidelity_stats import speed_drift
from bench.load_phases import run_phases
from calibration.fit_acceptance import RunRounds
from calibration.fit_drift import speed_drift as speed_drift_series
from calibration.fit_idle import after_idle
from calibration.overheads import ExecutorCosts
from calibration.profile import Profile
from saguaro_sim import SpecConfig
from saguaro_sim.load import RequestStream, write_trace


def run_once(spec: SpecConfig, profile: Profile, prompts: list[list[int]], tokens: int, args,
             trace: Path | None = None):
    """One real run of ``spec`` as bench_load makes all of them (its protocol, threads and seed, resolved with
    ``profile``): fixed-batch, or in load mode over ``trace``; the RunReport."""
    from saguaro_exec import RunConfig, run

    return run(RunConfig(spec=spec, prompts=prompts, max_new_tokens=tokens, profile=profile,
                         arrivals=None if trace is None else {"trace": str(trace)}, ssd_protocol=args.protocol,
                         threads=args.threads, seed=args.seed))


DRIFT_WHAT = {
    "beside": "a fixed-batch run of the same mode before and after every load run: rounds measured / charged",
    "probe": "bench.machine_speed.speed_probe: target and draft forwards of 4 tokens, median of 15 each; before and "
             "after every run, against the calibration steps' (reference_s)"}


def cell_drift(samples: list[float | None], reference: list[float], method: str) -> float | None:
    """A cell's speed drift: the median of its repeats' beside-runs (measured / charged), or for the probe the
    median probe of its repeats over the calibration steps' (``speed_drift``)."""
    if method == "probe":
        return speed_drift(samples, reference)
    got = [x for x in samples if x is not None and math.isfinite(x) and x > 0]
    return float(np.median(got)) if got else None


IDLE_SEED = 7919   # the after-idle calibration run's trace seed offset (its arrivals are not any level's)
IDLE_LONGER = 2    # its requests are this many times the benchmark's output tokens (SD: ~20 rounds each)
IDLE_MIN_REQUESTS = 48   # ~30 idle gaps at the light level (3 runs of 96 gave 136-160)


def fit_after_idle(profiles: dict[str, Profile], specs: dict[str, SpecConfig], ids: list[list[int]],
                   stream: RequestStream, args) -> tuple[dict[str, Profile], dict[str, dict]]:
    """Every mode's profile with the extra round shares after an idle gap (``executor.after_idle``) fitted on one
    load-mode run of its spec over ``stream`` (written to a temporary trace, removed after), and each fit's info."""
    trace = write_trace(stream, Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_load-idle-{os.getpid()}.jsonl")
    out, fits = dict(profiles), {}
    try:
        for m, spec in specs.items():
            rep = run_once(spec, profiles[m], ids, int(stream.output_tokens.max()), args, trace)
            excess, info = after_idle([rep.measurements.rounds])
            ex = profiles[m].executor if profiles[m].executor is not None else ExecutorCosts()
            out[m] = dataclasses.replace(profiles[m], executor=ex.with_after_idle(excess))
            fits[m] = {"after_idle": excess, **info}
    finally:
        trace.unlink(missing_ok=True)
    return out, fits


def hour_drift_runs(specs: dict[str, SpecConfig], profiles: dict[str, Profile], ids: list[list[int]],
                    args) -> dict[str, list[dict]]:
    """One fixed-batch run per mode of all the benchmark's requests (``args.requests`` of its prompts, cycled,
    ``args.tokens`` each: about as long as a saturated load run, 1-3 s here), as the load runs run them (spawned
    draft); their round rows. The acceptance runs before them are too short for a series (2026-12-03: 26 values)."""
    prompts = [ids[i % len(ids)] for i in range(args.requests)]
    return {m: run_once(spec, profiles[m], prompts, args.tokens, args).measurements.rounds
            for m, spec in specs.items()}


def hour_drift(runs: dict[str, list[dict]]) -> tuple[list[float], dict]:
    """The machine's speed-drift series (calibration/fit_drift.py) of the benchmark's own fixed-batch runs, one per
    mode, made right before the measurement (``hour_drift_runs``): (series, info). The profile's series is the
    calibration hour's, and it sets the predicted p99 TPOT (2026-12-03: a calibration with an 80% noise floor
    over-predicted the p99 by up to 47%); this one is the hour of the load runs. Empty where no run has enough
    rounds."""
    return speed_drift_series([RunRounds(k=0, temperature=0.0, sampler_c=1.0, mode=m, rounds=rows)
                               for m, rows in runs.items() if rows])


def with_drift_series(profiles: dict[str, Profile], series: list[float]) -> dict[str, Profile]:
    """Every mode's profile with its executor's speed-drift series replaced by ``series``."""
    return {m: dataclasses.replace(p, executor=(p.executor if p.executor is not None else ExecutorCosts())
                                   .with_drift(series)) for m, p in profiles.items()}


def beside_speed(spec: SpecConfig, profile: Profile, ids: list[list[int]], args) -> float | None:
    """The machine's speed now for this mode against ``profile``: a fixed-batch run of ``spec`` (2 x batch of the
    benchmark's prompts, refilled as rows finish; ~0.1-0.3 s), its rounds measured / charged by the load
    simulator's cost model (``run_phases``), the number the round-speed diagnostic reads off a load run."""
    rep = run_once(spec, profile, ids[: 2 * args.batch], args.tokens, args)
    return run_phases(rep.measurements.rounds, profile, spec, float(np.mean([len(p) for p in ids])),
                      spec.backup == "fast")["round_measured_over_charged"]
