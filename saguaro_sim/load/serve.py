"""simulate_load(profile, config, stream, ...) -> LoadResult: one replica serving a request stream."""

from __future__ import annotations

import time

import numpy as np

from calibration.errors import ConfigError, check_number
from calibration.profile import Profile
from saguaro_sim.config import SpecConfig
from saguaro_sim.load.engine import Replica
from saguaro_sim.load.metrics import SLO, LoadResult, gpus_of, slo_verdict, summary, usd_per_million
from saguaro_sim.load.schedule import ConfigSchedule
from saguaro_sim.load.stream import RequestStream


def target_devices_of(profile: Profile) -> int:
    """GPUs the profile's target occupies (tensor-parallel size), 1 when the profile does not say."""
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    placement = profile.placement
    return int(placement.get("tp_size") or prov.get("target_devices") or prov.get("target_tp") or 1)


def simulate_load(profile: Profile, config: SpecConfig | ConfigSchedule, stream: RequestStream, max_batch: int = 64,
                  seed: int = 0, slo: SLO | None = None, gpu_hour_usd: float | None = None,
                  target_devices: int | None = None, ssd_width: str = "live", jitter: bool = True) -> LoadResult:
    """Serve `stream` with continuous batching in up to max_batch rows, using `config` (one SpecConfig, or a
    ConfigSchedule giving the config per live batch size); latencies per request, SLO verdicts when `slo`
    is given, cost per million output tokens when `gpu_hour_usd` is. TTFT ends with a request's first decode
    round (its prefill gives no token, as in the executor), TPOT = (finish - first token) / (tokens - 1).
    ssd_width: the rows an SSD round forwards, "live" (the live ones, as AR and SD), "prefix" (every slot up
    to the last live one: saguaro_exec's SSD over a tensor-parallel target, whose rows stay in place; elsewhere
    it moves live rows over finished ones, "live") or "batch" (all min(max_batch,
    requests) slots while any is live: the executor's SSD before it skipped finished rows). jitter: draw each
    round's (verification, draft-side) multipliers from the profile's measured pairs (profile.executor.jitter;
    nothing without them), seeded by ``seed``; False charges every round its mean cost."""
    if not isinstance(profile, Profile):
        raise ConfigError("profile", f"expected Profile, got {type(profile).__name__}", "Profile")
    if isinstance(config, SpecConfig):
        config = ConfigSchedule.fixed(config)
    if not isinstance(config, ConfigSchedule):
        raise ConfigError("config", f"expected SpecConfig or ConfigSchedule, got {type(config).__name__}",
                          "SpecConfig | ConfigSchedule")
    if not isinstance(stream, RequestStream):
        raise ConfigError("stream", f"expected RequestStream, got {type(stream).__name__}",
                          "poisson_stream(...) or load_trace(path)")
    check_number("max_batch", max_batch, 1, 4096, integer=True)
    check_number("seed", seed, 0, integer=True)
    if gpu_hour_usd is not None:
        check_number("gpu_hour_usd", gpu_hour_usd, 0.0)
    if not isinstance(jitter, bool):
        raise ConfigError("jitter", f"expected true or false, got {jitter!r}", "true | false")
    wall = time.perf_counter()
    replica = Replica(profile, config, stream, max_batch, seed, ssd_width, jitter)
    span = replica.run()
    ttft = replica.first_token_s - stream.arrival_s
    decode = replica.finish_s - replica.first_token_s
    out = stream.output_tokens
    tpot = np.where(out > 1, decode / np.maximum(out - 1, 1), np.nan)
    latency = replica.finish_s - stream.arrival_s
    tokens = int(out.sum())
    span = max(span, 1e-12)
    throughput = tokens / span
    gpus = gpus_of(config.mode, target_devices or target_devices_of(profile), config.draft_devices,
                   config.placement)
    res = LoadResult(
        mode=config.mode, requests=len(stream), offered_qps=stream.offered_qps, sim_time_s=span, output_tokens=tokens,
        throughput=throughput, request_throughput=len(stream) / span, ttft_s=summary(ttft), tpot_s=summary(tpot),
        latency_s=summary(latency), mean_batch=replica.batch_time / span,
        target_utilization=min(1.0, replica.target_busy / span),
        draft_utilization=min(1.0, replica.draft_busy / (span * config.draft_devices)) if config.draft_devices else 0.0,
        gpus=gpus, tokens_per_s_per_gpu=throughput / gpus, rounds=replica.rounds, prefills=replica.prefills,
        prefill_s=replica.prefill_s, rounds_by_width={str(w): int(n) for w, n in sorted(replica.widths.items())},
        schedule=config.to_dict(),
        per_request={"arrival_s": stream.arrival_s, "ttft_s": ttft, "tpot_s": tpot, "latency_s": latency})
    if slo is not None:
        good, meets = slo_verdict(ttft, tpot, slo)
        res.goodput_qps, res.slo_attainment, res.meets_slo = float(good.sum()) / span, float(good.mean()), meets
    if gpu_hour_usd is not None:
        res.usd_per_million_tokens = usd_per_million(gpus, gpu_hour_usd, throughput)
    res.wall_s = time.perf_counter() - wall
    return res
