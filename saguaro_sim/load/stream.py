"""Request streams: Poisson arrivals with prompt / output length distributions, or a JSONL trace.

A trace line is an object {"arrival_s": float, "prompt_tokens": int, "output_tokens": int} (arrival times
in seconds from any origin; they are sorted and shifted to start at 0).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibration.errors import ConfigError, check_choice, check_number

SHAPES = ("fixed", "uniform", "lognormal", "exponential")


@dataclass(frozen=True)
class Lengths:
    """Token-length distribution: fixed `mean`, or uniform / lognormal / exponential around it
    (`spread`: the coefficient of variation of the lognormal, the half-width / mean of the uniform)."""

    mean: int = 256
    shape: str = "fixed"
    spread: float = 0.5
    lo: int = 1
    hi: int = 32768

    def __post_init__(self) -> None:
        check_number("mean", self.mean, 1, 10_000_000, integer=True)
        check_choice("shape", self.shape, SHAPES)
        check_number("spread", self.spread, 0.0, 10.0)
        check_number("lo", self.lo, 1, 10_000_000, integer=True)
        check_number("hi", self.hi, self.lo, 10_000_000, integer=True)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n integer lengths, clipped to [lo, hi]."""
        m = float(self.mean)
        if self.shape == "fixed":
            x = np.full(n, m)
        elif self.shape == "uniform":
            x = rng.uniform(m * (1 - min(self.spread, 1.0)), m * (1 + min(self.spread, 1.0)), n)
        elif self.shape == "exponential":
            x = rng.exponential(m, n)
        else:
            s2 = np.log1p(self.spread ** 2)
            x = rng.lognormal(np.log(m) - s2 / 2, np.sqrt(s2), n)
        return np.clip(np.rint(x), self.lo, self.hi).astype(np.int64)


@dataclass(frozen=True)
class RequestStream:
    """Requests in arrival order: arrival time (s), prompt tokens, output tokens (numpy arrays)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if n == 0:
            raise ConfigError("stream", "has no requests", "at least one request")
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ConfigError("stream", "arrival_s, prompt_tokens and output_tokens differ in length", "equal lengths")
        if np.any(np.diff(self.arrival_s) < 0):
            raise ConfigError("stream.arrival_s", "not sorted", "non-decreasing arrival times")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def offered_qps(self) -> float:
        """Requests per second of the stream (n / span of the arrivals; inf when all arrive at once)."""
        span = float(self.arrival_s[-1] - self.arrival_s[0])
        return (len(self) - 1) / span if span > 0 else float("inf")

    def split(self, replicas: int, seed: int = 0) -> RequestStream:
        """What one of `replicas` replicas receives when each request goes to a random replica (thinning a
        Poisson stream this way leaves a Poisson stream at rate / replicas)."""
        check_number("replicas", replicas, 1, 1_000_000, integer=True)
        if replicas == 1:
            return self
        keep = np.random.default_rng(seed).integers(0, replicas, len(self)) == 0
        keep[0] = True  # never empty
        return RequestStream(self.arrival_s[keep] - self.arrival_s[keep][0], self.prompt_tokens[keep],
                             self.output_tokens[keep])


def poisson_stream(rate_qps: float, num_requests: int, prompt: Lengths | int = 512, output: Lengths | int = 256,
                   seed: int = 0) -> RequestStream:
    """num_requests Poisson arrivals at rate_qps requests/s (rate inf: all at t = 0)."""
    check_number("rate_qps", rate_qps, 0.0, lo_open=True)
    check_number("num_requests", num_requests, 1, 10_000_000, integer=True)
    rng = np.random.default_rng(seed)
    prompt = Lengths(prompt) if isinstance(prompt, int) else prompt
    output = Lengths(output) if isinstance(output, int) else output
    if np.isinf(rate_qps):
        arrivals = np.zeros(num_requests)
    else:
        arrivals = np.cumsum(rng.exponential(1.0 / rate_qps, num_requests))
        arrivals -= arrivals[0]
    return RequestStream(arrivals, prompt.draw(rng, num_requests), output.draw(rng, num_requests))


def load_trace(path: str | os.PathLike, field: str = "trace") -> RequestStream:
    """Read a JSONL trace; errors name the file, the line and the key."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(field, f"trace file {str(p)!r} not found", "a JSONL file of {arrival_s, prompt_tokens, "
                          "output_tokens} objects")
    rows = []
    for i, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{p}:{i}"
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(where, f"not JSON ({e.msg})", "one JSON object per line") from None
        if not isinstance(d, dict):
            raise ConfigError(where, "not an object", '{"arrival_s": 0.5, "prompt_tokens": 512, "output_tokens": 256}')
        for key in ("arrival_s", "prompt_tokens", "output_tokens"):
            if key not in d:
                raise ConfigError(f"{where}: {key}", "missing", "arrival_s, prompt_tokens and output_tokens")
        rows.append((check_number(f"{where}: arrival_s", d["arrival_s"], 0.0),
                     check_number(f"{where}: prompt_tokens", d["prompt_tokens"], 1, 10_000_000, integer=True),
                     check_number(f"{where}: output_tokens", d["output_tokens"], 1, 10_000_000, integer=True)))
    if not rows:
        raise ConfigError(field, f"trace file {str(p)!r} has no requests", "at least one JSON line")
    a = np.array(rows, dtype=float)
    a = a[np.argsort(a[:, 0], kind="stable")]
    return RequestStream(a[:, 0] - a[0, 0], a[:, 1].astype(np.int64), a[:, 2].astype(np.int64))


def write_trace(stream: RequestStream, path: str | os.PathLike) -> Path:
    """Write a stream as a JSONL trace (the format load_trace reads)."""
    from calibration.jsonio import write_atomic

    lines = [json.dumps({"arrival_s": round(float(a), 6), "prompt_tokens": int(p), "output_tokens": int(o)})
             for a, p, o in zip(stream.arrival_s, stream.prompt_tokens, stream.output_tokens)]
    write_atomic(path, "\n".join(lines) + "\n")
    return Path(path)
