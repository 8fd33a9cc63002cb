"""RunReport: what a real run measured, summarized, plus the raw per-round Measurements and a trace."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from calibration.jsonio import write_atomic
from calibration.measurements import Measurements


@dataclass
class RunReport:
    """Throughput, acceptance, cache hits and waits of one run; ``measurements`` feeds calibration."""

    mode: str
    texts: list[str]
    token_ids: list[list[int]]
    tokens_per_s: float
    tokens_per_s_per_seq: list[float]
    mean_tokens_per_round: float
    acceptance_per_position: list[float]
    hit_rate: float | None
    wait_share: float
    ceiling_tokens_per_s: float   # zero drafting: the run's own wall clock less the waits for the draft
    wall_s: float
    measurements: Measurements
    events: list[dict] = field(default_factory=list, repr=False)
    faults: list[dict] = field(default_factory=list)    # draft faults survived (faults.FaultRecord dicts)
    achieved: dict = field(default_factory=dict)  # {"target"|"draft": bytes/s, FLOP/s, roofline fractions}
    resolved: dict = field(default_factory=dict)  # saguaro_sim.resolve's ResolvedSpec the run executed
    synthetic: dict | None = None   # synthetic acceptance (engine/synthetic.py): TIMING ONLY, not lossless
    # per request, as the simulator's load mode (measure/load.py): seconds at p50 / p90 / p99 / mean
    ttft_s: dict = field(default_factory=dict)
    tpot_s: dict = field(default_factory=dict)
    latency_s: dict = field(default_factory=dict)
    throughput: float = 0.0               # output tokens / s from the first arrival to the last finish
    request_throughput: float = 0.0       # requests / s, the same span
    offered_qps: float | None = None      # the load mode's arrival rate (None: all at t = 0 or a trace)
    per_request: dict = field(default_factory=dict, repr=False)   # lists: arrival_s, ttft_s, tpot_s, latency_s
    verify_bound_tokens_per_s: float = 0.0   # tokens / verification time alone (no prefill, no bookkeeping)

    def summary(self) -> dict:
        """The headline numbers as a flat dict (no per-round data)."""
        return {"mode": self.mode, "tokens_per_s": self.tokens_per_s, "mean_tokens_per_round":
                self.mean_tokens_per_round, "acceptance_per_position": self.acceptance_per_position,
                "hit_rate": self.hit_rate, "wait_share": self.wait_share,
                "ceiling_tokens_per_s": self.ceiling_tokens_per_s,
                "verify_bound_tokens_per_s": self.verify_bound_tokens_per_s, "wall_s": self.wall_s,
                "tokens": sum(len(t) for t in self.token_ids), "faults": self.faults, "achieved": self.achieved,
                "resolved": self.resolved, "lossless": self.synthetic is None, "synthetic": self.synthetic,
                "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "latency_s": self.latency_s,
                "throughput": self.throughput, "request_throughput": self.request_throughput,
                "offered_qps": self.offered_qps}

    def achieved_rows(self) -> list[list]:
        """Table rows: achieved GB/s and GFLOP/s per side, and their share of the device peak."""
        rows = []
        for side in ("target", "draft"):
            a = self.achieved.get(side)
            if not a:
                continue
            name = f"{side} {a['phase']}"
            if a["bandwidth_fraction"] is None:
                share = "peak unknown"
            else:
                share = (f"{a['bandwidth_fraction'] * 100:.3g}% HBM, {a['flops_fraction'] * 100:.3g}% FLOP/s "
                         f"({a['peak']})")
            rows += [[f"{name} GB/s", a["bytes_per_s"] / 1e9], [f"{name} GFLOP/s", a["flops_per_s"] / 1e9],
                     [f"{name} of peak", share]]
        return rows

    def to_dict(self) -> dict:
        return {**self.summary(), "tokens_per_s_per_seq": self.tokens_per_s_per_seq, "texts": self.texts,
                "per_request": self.per_request,
                "token_ids": self.token_ids, "measurements": self.measurements.to_dict()}

    def to_json(self, path: str | os.PathLike) -> None:
        """Write the whole report (summary, texts, measurements) atomically."""
        write_atomic(path, json.dumps(self.to_dict(), indent=1) + "\n")

    def chrome_trace(self, path: str | os.PathLike) -> str:
        """Chrome trace-event JSON of the real run (verifier and speculator tracks), simulator format."""
        from saguaro_sim.trace import chrome_trace

        name = f"saguaro_exec {self.mode}"
        if self.synthetic is not None:
            name += f" [{self.synthetic['label']}]"
        return chrome_trace(self.events, path, process_name=name)


def summarize(mode: str, k: int, rounds: list[dict], wall_s: float, tokens: list[list[int]],
              per_seq_s: list[float]) -> dict:
    """Aggregate per-round rows into the RunReport headline numbers."""
    produced = [a + 1 for r in rounds for a in r["accepted"]]
    total = sum(len(t) for t in tokens)
    reached = [0] * (k + 1)
    for r in rounds:
        for a in r["accepted"]:
            for i in range(min(a, k) + 1):
                reached[i] += 1
    acc_pos = [reached[i + 1] / reached[i] if reached[i] else 0.0 for i in range(k)] if mode != "ar" else []
    hits = [h for r in rounds for h in r["hit"] if h is not None]
    spent = sum(r["t1"] - r["t0"] for r in rounds)
    verify = sum(r["verify_s"] for r in rounds)
    # zero drafting: the same run without the verifier's waits for the draft and its messages (prefills,
    # the verifier's bookkeeping stay: AR scores 100%); tokens / verification alone also drops those
    drafting = sum(r["wait_s"] + r["msg_s"] for r in rounds)
    return {
        "tokens_per_s": total / wall_s if wall_s > 0 else 0.0,
        "tokens_per_s_per_seq": [len(t) / s if s > 0 else 0.0 for t, s in zip(tokens, per_seq_s)],
        "mean_tokens_per_round": total / len(produced) if produced else 0.0,   # tokens kept (<= max_new)
        "acceptance_per_position": acc_pos,
        "hit_rate": sum(hits) / len(hits) if hits else None,
        "wait_share": sum(r["wait_s"] for r in rounds) / spent if spent > 0 else 0.0,
        "ceiling_tokens_per_s": total / (wall_s - drafting) if wall_s > drafting else 0.0,
        "verify_bound_tokens_per_s": total / verify if verify > 0 else 0.0,
    }
