"""What one load simulation measured: latency percentiles, throughput, goodput under SLOs, GPUs and cost."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from calibration.errors import check_number

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class SLO:
    """Latency targets a request must meet to count as good: time per output token and time to first token
    (milliseconds), judged at `percentile` of the requests when planning."""

    tpot_ms: float = 30.0
    ttft_ms: float = 500.0
    percentile: float = 99.0

    def __post_init__(self) -> None:
        check_number("slo_tpot_ms", self.tpot_ms, 0.0, lo_open=True)
        check_number("slo_ttft_ms", self.ttft_ms, 0.0, lo_open=True)
        check_number("slo_percentile", self.percentile, 0.0, 100.0, lo_open=True)


@dataclass
class LoadResult:
    """Per-request latencies (seconds) and their summaries for one replica serving a stream."""

    mode: str
    requests: int
    offered_qps: float
    sim_time_s: float
    output_tokens: int
    throughput: float                 # output tokens / s
    request_throughput: float         # finished requests / s
    ttft_s: dict[str, float]          # p50 / p90 / p99 / mean
    tpot_s: dict[str, float]
    latency_s: dict[str, float]
    mean_batch: float
    target_utilization: float
    draft_utilization: float
    gpus: int
    tokens_per_s_per_gpu: float
    goodput_qps: float | None = None  # requests / s meeting both SLOs
    slo_attainment: float | None = None
    meets_slo: bool | None = None
    usd_per_million_tokens: float | None = None
    rounds: int = 0
    prefills: int = 0
    prefill_s: float = 0.0            # seconds the decode batch waited for prefills
    rounds_by_width: dict = field(default_factory=dict)   # rows a round was charged for -> rounds
    wall_s: float = 0.0
    schedule: list = field(default_factory=list)
    per_request: dict = field(default_factory=dict)   # arrays: arrival_s, ttft_s, tpot_s, latency_s

    def to_dict(self, per_request: bool = False) -> dict:
        """JSON-able dict (per-request arrays only when asked)."""
        d = asdict(self)
        d["per_request"] = {k: np.asarray(v).tolist() for k, v in self.per_request.items()} if per_request else {}
        return d


def summary(x: np.ndarray) -> dict[str, float]:
    """p50 / p90 / p99 and the mean of the finite values (NaN when none)."""
    x = x[np.isfinite(x)]
    if not len(x):
        return {**{f"p{p}": float("nan") for p in PERCENTILES}, "mean": float("nan")}
    return {**{f"p{p}": float(np.percentile(x, p)) for p in PERCENTILES}, "mean": float(np.mean(x))}


def gpus_of(mode: str, target_devices: int, draft_devices: int, placement: str = "separate") -> int:
    """GPUs one replica occupies: the target's, plus SSD's own draft devices (SD drafts on the target's, and
    so does SSD with placement "shared")."""
    return target_devices + (draft_devices if mode == "ssd" and placement == "separate" else 0)


def usd_per_million(gpus: int, gpu_hour_usd: float, tokens_per_s: float) -> float:
    """Cost of a million output tokens when `gpus` GPUs at gpu_hour_usd each serve tokens_per_s."""
    return float("inf") if tokens_per_s <= 0 else gpus * gpu_hour_usd / 3600.0 / tokens_per_s * 1e6


def slo_verdict(ttft: np.ndarray, tpot: np.ndarray, slo: SLO) -> tuple[np.ndarray, bool]:
    """(per-request good flags, whether the SLO percentile of TTFT and of TPOT are both within target)."""
    tpot_ok = np.where(np.isfinite(tpot), tpot * 1e3 <= slo.tpot_ms, True)   # one-token requests: no TPOT
    good = (ttft * 1e3 <= slo.ttft_ms) & tpot_ok
    tp = tpot[np.isfinite(tpot)]
    p_tpot = float(np.percentile(tp, slo.percentile)) if len(tp) else 0.0
    meets = float(np.percentile(ttft, slo.percentile)) * 1e3 <= slo.ttft_ms and p_tpot * 1e3 <= slo.tpot_ms
    return good, bool(meets)
