"""Load mode of a real run: when requests arrive (``Arrivals``) and what serving them cost each request
(TTFT, TPOT, end-to-end latency at p50 / p90 / p99, throughput), with the simulator's definitions
(saguaro_sim/load/serve.py) and its ``summary`` so that predicted and measured numbers compare one to one.

TTFT = first token - arrival, TPOT = (finish - first token) / (output tokens - 1) (none for one-token
outputs), latency = finish - arrival, throughput = output tokens / (last finish - first arrival).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from calibration.errors import ConfigError, check_number


@dataclass(frozen=True)
class Arrivals:
    """Requests arrive by a Poisson process at ``qps`` per second (inf: all at t = 0), or at the times of a
    JSONL ``trace`` ({arrival_s, prompt_tokens, output_tokens} per line, saguaro_sim's format), its clock
    rescaled to ``qps`` when both are given. With a trace each line is a request: prompts are taken from
    the run's prompts in turn, cut or repeated to ``prompt_tokens``, and generate ``output_tokens``."""

    qps: float | None = None
    seed: int = 0
    trace: str | None = None

    def __post_init__(self) -> None:
        if self.qps is None and self.trace is None:
            raise ConfigError("arrivals", "needs qps or trace", "qps > 0 (inf: all at once) and/or a trace file")
        if self.qps is not None and self.qps != math.inf:          # inf: every request at t = 0
            check_number("arrivals.qps", self.qps, 0.0, lo_open=True)
        check_number("arrivals.seed", self.seed, 0, 2**62, integer=True)
        if self.trace is not None and not isinstance(self.trace, str | os.PathLike):
            raise ConfigError("arrivals.trace", f"expected a path, got {type(self.trace).__name__}", "a JSONL file")
        if self.trace is not None and not os.path.isfile(self.trace):
            raise ConfigError("arrivals.trace", f"trace file {os.fspath(self.trace)!r} not found",
                              "a JSONL file of {arrival_s, prompt_tokens, output_tokens} objects")

    @classmethod
    def of(cls, value: object) -> Arrivals | None:
        """None, an Arrivals, or a dict of its fields (a TOML ``[arrivals]`` table)."""
        if value is None or isinstance(value, Arrivals):
            return value
        if isinstance(value, dict):
            unknown = set(value) - {"qps", "seed", "trace"}
            if unknown:
                raise ConfigError(f"arrivals.{sorted(unknown)[0]}", "unknown key", "qps, seed, trace")
            return cls(**value)
        raise ConfigError("arrivals", f"expected a table, got {type(value).__name__}", "{qps = R, seed = S, trace = FILE}")


def schedule(arrivals: Arrivals, ids: list[list[int]], max_new: int
             ) -> tuple[list[list[int]], list[float], list[int] | None]:
    """(request prompts, arrival times from the first, per-request max new tokens or None) for ``ids``."""
    from saguaro_sim.load.stream import RequestStream, load_trace, poisson_stream

    if arrivals.trace is None and arrivals.qps == math.inf:
        return ids, [0.0] * len(ids), None
    if arrivals.trace is None:
        s = poisson_stream(arrivals.qps, len(ids), 1, max_new, arrivals.seed)
        return ids, [float(a) for a in s.arrival_s], None
    tr = load_trace(arrivals.trace, field="arrivals.trace")
    if arrivals.qps is not None and math.isfinite(tr.offered_qps):
        tr = RequestStream(tr.arrival_s * (tr.offered_qps / arrivals.qps), tr.prompt_tokens, tr.output_tokens)
    prompts = []
    for i, n in enumerate(tr.prompt_tokens):
        base = ids[i % len(ids)]
        prompts.append((base * (-(-int(n) // len(base))))[: int(n)])
    return prompts, [float(a) for a in tr.arrival_s], [int(o) for o in tr.output_tokens]


def request_metrics(arrival_s: list[float], first_s: list[float], finish_s: list[float],
                    out_tokens: list[int]) -> dict:
    """TTFT / TPOT / latency summaries (seconds: p50, p90, p99, mean), throughput (output tokens / s) and
    request throughput, from per-request times on one clock; ``per_request`` lists them (arrivals from the first; None: no TPOT)."""
    from saguaro_sim.load.metrics import summary  # the simulator's own, imported late (simpy)
    arr, first, fin = np.asarray(arrival_s, float), np.asarray(first_s, float), np.asarray(finish_s, float)
    out = np.asarray(out_tokens, float)
    tpot = np.where(out > 1, (fin - first) / np.maximum(out - 1, 1), np.nan)
    span = max(float(fin.max() - arr.min()), 1e-12) if len(arr) else 1e-12
    return {"ttft_s": summary(first - arr), "tpot_s": summary(tpot), "latency_s": summary(fin - arr),
            "throughput": float(out.sum()) / span, "request_throughput": len(arr) / span,
            "per_request": {"arrival_s": (arr - arr.min()).tolist(), "ttft_s": (first - arr).tolist(), "tpot_s": [None if math.isnan(x) else x for x in tpot.tolist()],
                            "latency_s": (fin - arr).tolist()}}
