"""plan(profile, qps, slo, ...) -> LoadPlan: per load level the cheapest deployment meeting the SLOs.

A deployment is `replicas` x (target GPUs + draft GPUs), each replica serving 1/replicas of the requests
(random routing: a Poisson stream stays Poisson). For each mode (AR, SD, SSD, each with its closed-form-best
config per live batch size) and load, the fewest replicas whose simulated SLO percentile of TTFT and TPOT are
within target (found by doubling then bisection: meeting the SLO is monotone in replicas); the cheapest mode
per load (fewest GPUs, ties to the lower p99 TPOT); and the loads where the winner of SSD vs SD, and of
SD vs AR, changes. Jobs (one per mode and load) run on the machine's cores.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np

from calibration.errors import ConfigError, check_number
from calibration.profile import Profile
from saguaro_sim.analytic import predict
from saguaro_sim.config import MODES
from saguaro_sim.load.metrics import SLO, gpus_of, usd_per_million
from saguaro_sim.load.schedule import ConfigSchedule, best_schedule
from saguaro_sim.load.serve import simulate_load, target_devices_of
from saguaro_sim.load.stream import Lengths, RequestStream, poisson_stream
from saguaro_sim.workload import Workload

PAIRS = (("ssd", "sd"), ("sd", "ar"))


@dataclass
class LoadPlan:
    """rows: one per (load, mode) with the fewest replicas meeting the SLO (replicas None: none up to
    max_replicas); best: the cheapest row per load; crossovers: where the cheaper of a pair changes;
    single_replica: each mode's latencies on one replica per load (the p99 TPOT vs load curves)."""

    profile: str
    qps: list[float]
    slo: dict
    gpu_hour_usd: float
    target_devices: int
    rows: list[dict]
    best: list[dict | None]
    crossovers: list[dict]
    single_replica: list[dict]
    schedules: dict[str, list]
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def row(self, qps: float, mode: str) -> dict:
        """The row for one load level and mode."""
        for r in self.rows:
            if r["qps"] == qps and r["mode"] == mode:
                return r
        raise ConfigError("qps", f"no row for {qps} requests/s, mode {mode!r}", ", ".join(map(str, self.qps)))


def _stream_for(qps: float, replicas: int, trace: RequestStream | None, prompt: Lengths, output: Lengths,
                num_requests: int, seed: int) -> RequestStream:
    """What one replica receives at `qps` requests/s over `replicas` replicas."""
    if trace is None:
        return poisson_stream(qps / replicas, num_requests, prompt, output, seed)
    rate = trace.offered_qps
    scale = rate / qps if math.isfinite(rate) else 1.0   # stretch the trace's clock to the wanted load
    scaled = RequestStream(trace.arrival_s * scale, trace.prompt_tokens, trace.output_tokens)
    return scaled.split(replicas, seed)


def _outcome(res, replicas: int, gpus_per_replica: int, qps: float, mean_out: float, price: float,
             schedule: ConfigSchedule) -> dict:
    spec = schedule.for_batch(max(1, round(res.mean_batch)))
    gpus = replicas * gpus_per_replica
    return {"replicas": replicas, "gpus": gpus, "meets_slo": res.meets_slo,
            "usd_per_million_tokens": usd_per_million(gpus, price, qps * mean_out),
            "ttft_ms": {k: v * 1e3 for k, v in res.ttft_s.items()}, "tpot_ms": {k: v * 1e3 for k, v in res.tpot_s.items()},
            "latency_s": res.latency_s, "mean_batch": res.mean_batch, "slo_attainment": res.slo_attainment,
            "tokens_per_s_per_gpu": res.throughput / gpus_per_replica,
            "config": spec.replace(batch_size=max(1, round(res.mean_batch))).to_dict()}


def _job(args: tuple) -> dict:
    """One (mode, load): the fewest replicas meeting the SLO, and the single-replica latencies."""
    (profile, mode, schedule, qps, slo, trace, prompt, output, num_requests, max_batch, max_replicas, price,
     target_devices, lower, seed) = args
    gpr = gpus_of(mode, target_devices, schedule.draft_devices, schedule.placement)
    st_out = float(np.mean(trace.output_tokens)) if trace is not None else float(output.mean)
    memo: dict[int, object] = {}

    def run(r: int):
        if r not in memo:
            stream = _stream_for(qps, r, trace, prompt, output, num_requests, seed)
            memo[r] = simulate_load(profile, schedule, stream, max_batch, seed, slo, price, target_devices)
        return memo[r]

    single = run(1)
    lo, hi = max(0, lower - 1), max(1, lower)   # below the closed-form bound a replica cannot keep up
    while not run(hi).meets_slo:
        lo = hi
        if hi >= max_replicas:
            hi = None
            break
        hi = min(max_replicas, hi * 2)
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if run(mid).meets_slo else (mid, hi)
    row = {"qps": qps, "mode": mode, "gpus_per_replica": gpr, "simulations": len(memo)}
    if hi is None:
        row.update({"replicas": None, "gpus": None, "meets_slo": False, "usd_per_million_tokens": None})
    else:
        row.update(_outcome(run(hi), hi, gpr, qps, st_out, price, schedule))
    one = {"qps": qps, "mode": mode, "meets_slo": single.meets_slo, "mean_batch": single.mean_batch,
           "ttft_ms": {k: v * 1e3 for k, v in single.ttft_s.items()},
           "tpot_ms": {k: v * 1e3 for k, v in single.tpot_s.items()}, "throughput": single.throughput}
    return {"row": row, "single": one}


def _beats(a: dict, b: dict) -> bool:
    """a is the cheaper deployment: fewer GPUs, ties to the lower p99 TPOT (an infeasible one never wins)."""
    if a["gpus"] is None:
        return False
    if b["gpus"] is None:
        return True
    return (a["gpus"], a["tpot_ms"]["p99"]) < (b["gpus"], b["tpot_ms"]["p99"])


def crossovers(rows: list[dict], qps: Sequence[float], pairs: Sequence[tuple[str, str]] = PAIRS) -> list[dict]:
    """Where the cheaper mode of each pair changes along the load grid: {pair, from, to, between_qps}."""
    by = {(r["qps"], r["mode"]): r for r in rows}
    out = []
    for a, b in pairs:
        if (qps[0], a) not in by or (qps[0], b) not in by:
            continue
        winners = []
        for q in qps:
            ra, rb = by[(q, a)], by[(q, b)]
            winners.append(a if _beats(ra, rb) else b if _beats(rb, ra) else None)
        prev_q, prev = qps[0], winners[0]
        for q, w in zip(qps[1:], winners[1:]):
            if w is not None and prev is not None and w != prev:
                out.append({"pair": f"{a} vs {b}", "from": prev, "to": w, "between_qps": [prev_q, q]})
            if w is not None:
                prev_q, prev = q, w
    return out


def _lower_bound(profile: Profile, schedule: ConfigSchedule, qps: float, max_batch: int, prompt: float,
                 output: float) -> int:
    """Replicas below which even a full batch cannot keep up (closed forms at max_batch): where the search starts."""
    spec = schedule.for_batch(max_batch).replace(batch_size=max_batch)
    w = Workload(num_sequences=max_batch, output_tokens=max(1, round(output)), prompt_tokens=round(prompt))
    peak = predict(profile, spec, w).throughput
    return max(1, math.ceil(qps * output / peak)) if peak > 0 else 1


def plan(profile: Profile, qps: Sequence[float], slo: SLO | None = None, trace: RequestStream | None = None,
         prompt: Lengths | int = 512, output: Lengths | int = 256, num_requests: int = 1000, max_batch: int = 64,
         modes: Sequence[str] = MODES, gpu_hour_usd: float = 2.0, max_replicas: int = 256, temperature: float = 0.0,
         draft_devices: int = 1, target_devices: int | None = None, seed: int = 0, workers: int | None = None,
         progress: bool = False, placement: str = "separate", sharing: str | None = None) -> LoadPlan:
    """Plan deployments by load (see the module docstring); workers=None uses every core, 1 runs inline."""
    if not isinstance(profile, Profile):
        raise ConfigError("profile", f"expected Profile, got {type(profile).__name__}", "Profile")
    qps = [float(check_number(f"qps[{i}]", q, 0.0, 1e7, lo_open=True)) for i, q in enumerate(qps)]
    if not qps:
        raise ConfigError("qps", "is empty", "one or more loads in requests/s")
    qps = sorted(set(qps))
    slo = slo or SLO()
    prompt = Lengths(prompt) if isinstance(prompt, int) else prompt
    output = Lengths(output) if isinstance(output, int) else output
    check_number("num_requests", num_requests, 10, 10_000_000, integer=True)
    check_number("max_batch", max_batch, 1, 4096, integer=True)
    check_number("gpu_hour_usd", gpu_hour_usd, 0.0)
    check_number("max_replicas", max_replicas, 1, 100_000, integer=True)
    for m in modes:
        if m not in MODES:
            raise ConfigError("modes", f"unknown mode {m!r}", " | ".join(MODES))
    tdev = target_devices or target_devices_of(profile)
    mean_prompt = float(np.mean(trace.prompt_tokens)) if trace is not None else float(prompt.mean)
    mean_out = float(np.mean(trace.output_tokens)) if trace is not None else float(output.mean)
    schedules = {m: best_schedule(profile, m, max_batch, mean_prompt, mean_out, temperature,
                                  draft_devices=draft_devices, placement=placement, sharing=sharing) for m in modes}
    jobs = [(profile, m, schedules[m], q, slo, trace, prompt, output, num_requests, max_batch, max_replicas,
             gpu_hour_usd, tdev, _lower_bound(profile, schedules[m], q, max_batch, mean_prompt, mean_out), seed)
            for q in qps for m in modes]
    results = _run_jobs(jobs, workers, progress)
    rows = [r["row"] for r in results]
    best = []
    for q in qps:
        cands = [r for r in rows if r["qps"] == q and r["gpus"] is not None]
        win = None
        for r in cands:
            if win is None or _beats(r, win):
                win = r
        best.append(None if win is None else {"qps": q, "mode": win["mode"], "replicas": win["replicas"],
                                              "gpus": win["gpus"], "config": win["config"],
                                              "usd_per_million_tokens": win["usd_per_million_tokens"]})
    return LoadPlan(profile=profile.name, qps=qps, slo=asdict(slo), gpu_hour_usd=gpu_hour_usd, target_devices=tdev,
                    rows=rows, best=best, crossovers=crossovers(rows, qps, [p for p in PAIRS if set(p) <= set(modes)]),
                    single_replica=[r["single"] for r in results],
                    schedules={m: s.to_dict() for m, s in schedules.items()},
                    settings={"num_requests": num_requests, "max_batch": max_batch, "max_replicas": max_replicas,
                              "temperature": temperature, "draft_devices": draft_devices, "seed": seed,
                              "placement": placement, "sharing": sharing,
                              "trace": trace is not None, "prompt": asdict(prompt), "output": asdict(output)})


def _run_jobs(jobs: list[tuple], workers: int | None, progress: bool) -> list[dict]:
    from tqdm import tqdm

    workers = min(len(jobs), workers or os.cpu_count() or 1)
    bar = tqdm(total=len(jobs), disable=not progress, file=sys.stderr, desc="plan", unit="load x mode")
    try:
        if workers <= 1:
            out = []
            for j in jobs:
                out.append(_job(j))
                bar.update()
            return out
        with ProcessPoolExecutor(max_workers=workers) as pool:
            out = []
            for r in pool.map(_job, jobs):
                out.append(r)
                bar.update()
            return out
    finally:
        bar.close()
