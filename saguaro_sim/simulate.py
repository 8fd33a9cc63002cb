"""simulate(profile, spec, workload, seed) -> SimResult: a simpy discrete-event simulation of AR, SD or SSD.

Per-round events (one verification per round for the whole batch, one cache build per draft device),
randomness drawn in vectorized chunks from np.random.default_rng(seed): deterministic for a seed.
The workload's sequences are decoded in `spec.batch_size` slots, with continuous batching or in the
executor's fixed batches (see saguaro_sim/sim/batch.py); the spec is settled by saguaro_sim.resolve (the
same call the executor makes); time model (saguaro_sim/costs.py) and probability model as in analytic.py.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import simpy
from scipy.optimize import brentq

from calibration.errors import ConfigError, check_choice, check_number
from calibration.profile import Profile
from saguaro_sim.analytic import accept_pmfs, fast_backup_pmf, hit_table
from saguaro_sim.config import SpecConfig
from saguaro_sim.costs import RoundCosts
from saguaro_sim.resolve import PROTOCOLS, resolve
from saguaro_sim.sim.baseline import AREngine, SDEngine
from saguaro_sim.sim.batch import BatchState
from saguaro_sim.sim.ssd import SSDEngine
from saguaro_sim.trace import chrome_trace
from saguaro_sim.workload import Workload


@dataclass
class SimResult:
    """What one simulation measured; per-sequence numbers are over the workload's sequences."""

    mode: str
    backup: str
    tokens_per_s_per_seq: float
    per_seq_tokens_per_s: list[float]
    throughput: float
    tokens_per_round: float
    hit_rate: float
    verifier_idle_frac: float
    draft_utilization: float
    rounds: int
    sim_time_s: float
    tokens: int
    resolved: dict = field(default_factory=dict)  # the ResolvedSpec simulated (fanout, backup, protocol, ...)
    wall_s: float = 0.0
    events: list[dict] = field(default_factory=list)

    def to_dict(self, events: bool = False) -> dict:
        """Plain dict (JSON-able); the timeline only when events=True."""
        d = asdict(self)
        if not events:
            d.pop("events")
        return d

    def to_chrome_trace(self, path: str | os.PathLike) -> str:
        """Write the timeline (needs trace=True) as Chrome trace-event JSON; returns the path."""
        if not self.events:
            raise ConfigError("trace", "this result has no timeline events", "simulate(..., trace=True)")
        return chrome_trace(self.events, path, process_name=f"saguaro simulate ({self.mode})")


BATCHING = ("continuous", "kept", "fixed")


def _check_inputs(profile: object, spec: object, workload: object, seed: object) -> None:
    for name, value, cls in (("profile", profile, Profile), ("spec", spec, SpecConfig),
                             ("workload", workload, Workload)):
        if not isinstance(value, cls):
            raise ConfigError(name, f"expected {cls.__name__}, got {type(value).__name__}", cls.__name__)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError("seed", f"expected a non-negative integer, got {seed!r}", "integers >= 0")


def row_curves(profile: Profile, spec: SpecConfig, fast: bool, table: np.ndarray | None) -> list[tuple] | None:
    """Per-request (primary pmf, backup pmf, hit table) from the profile's fitted row multipliers, None for
    homogeneous rows or AR. The multipliers (pooled over several K) are rescaled by one common factor so the
    rows keep the fitted curve's tokens per round at this config's K: the pooled rates are a per-round mean,
    the harmonic mean of the rows' (every request makes the same tokens). The draft model's speculations
    scale; the fast backup's n-gram ones do not."""
    scales = profile.acceptance.row_scales(spec.temperature) if spec.mode != "ar" else ()
    if len(set(scales)) < 2:   # one multiplier, rescaled: the homogeneous model
        return None
    acc, args = profile.acceptance, (spec.k, spec.temperature, spec.sampler_c)
    target = acc.expected_tokens(*args)

    def harmonic(c: float) -> float:
        return len(scales) / sum(1.0 / acc.expected_tokens(*args, scale=c * m) for m in scales)

    lo, hi = 0.05, 20.0
    c = 1.0 if not harmonic(lo) < target < harmonic(hi) else float(
        brentq(lambda x: harmonic(x) - target, lo, hi, xtol=1e-5))
    out = []
    for m in scales:
        pmf = acc.length_pmf(*args, scale=c * m)
        out.append((pmf, fast_backup_pmf(profile, spec.k, spec.temperature) if fast else pmf, table))
    return out


def simulate(profile: Profile, spec: SpecConfig, workload: Workload, seed: int = 0, trace: bool = False,
             progress: bool = False, protocol: str = "auto", batching: str = "continuous",
             build_scale: float = 1.0) -> SimResult:
    """Run the discrete-event simulation of spec on profile for workload; trace=True keeps the timeline.
    ``protocol`` (SSD): "reply" = the draft answers each outcome; "push" = the draft sends each built cache
    and an all-hit round starts the next verification without a message round trip; "auto" = as the
    executor's ``RunConfig.ssd_protocol`` "auto" resolves it. ``batching``: "continuous" (finished slots
    refill from the queue, the batch shrinks once none waits), "kept" (refill in place; a finished row nobody
    takes keeps its slot and forwards cover every slot up to the last live one, as the SSD executor's do over a
    tensor-parallel target; elsewhere it moves live rows over finished ones: "continuous") or
    "fixed" (batches of batch_size;
    finished rows ride along until the batch's last finishes). ``build_scale``: SSD's cache builds take that
    many times their profiled cost (the optimizer's build margin: a draft slower than profiled)."""
    _check_inputs(profile, spec, workload, seed)
    check_choice("protocol", protocol, PROTOCOLS)
    check_choice("batching", batching, BATCHING)
    check_number("build_scale", build_scale, 0.0, 100.0)
    wall = time.perf_counter()
    rng = np.random.default_rng(seed)
    rs = resolve(spec, profile, protocol=protocol)
    fast = rs.backup == "fast"
    pmf_p, pmf_b = accept_pmfs(profile, spec, fast) if spec.mode != "ar" else (None, None)
    table = hit_table(profile, spec, fast) if spec.mode == "ssd" else None
    state = BatchState(spec.batch_size, workload.num_sequences, workload.output_tokens, workload.prompt_tokens,
                       rng, pmf_p, pmf_b, table, fixed=batching == "fixed",
                       keep=batching == "kept", rows=row_curves(profile, spec, fast, table))
    env = simpy.Environment()
    events: list | None = [] if trace else None
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=workload.num_sequences * workload.output_tokens, unit="tok", desc=f"simulate {spec.mode}")
    costs = RoundCosts(profile, spec, rs)
    if spec.mode == "ssd":
        engine = SSDEngine(env, profile, spec, state, events, bar, costs=costs, fast=fast, push=rs.protocol == "push",
                           build_scale=float(build_scale))
    else:
        engine = (SDEngine if spec.mode == "sd" else AREngine)(env, profile, spec, state, events, bar, costs=costs)
    engine.start()
    try:
        env.run(until=engine.done)
    finally:
        if bar is not None:
            bar.close()
    sim_time = env.now
    rates = state.per_seq_rates()
    return SimResult(
        mode=spec.mode, backup=("fast" if fast else "neural") if spec.mode == "ssd" else "none",
        tokens_per_s_per_seq=float(np.nanmean(rates)), per_seq_tokens_per_s=[float(r) for r in rates],
        throughput=state.tokens / sim_time if sim_time > 0 else float("inf"),
        tokens_per_round=state.tokens / max(1, state.seq_rounds),
        hit_rate=state.hits / max(1, state.seq_rounds) if spec.mode == "ssd" else 0.0,
        verifier_idle_frac=max(0.0, 1.0 - engine.verify_busy / sim_time) if sim_time > 0 else 0.0,
        draft_utilization=engine.draft_busy / (engine.draft_devices * sim_time) if sim_time > 0 else 0.0,
        rounds=engine.rounds, sim_time_s=sim_time, tokens=state.tokens, resolved=rs.to_dict(),
        wall_s=time.perf_counter() - wall,
        events=events or [])
