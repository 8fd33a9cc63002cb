"""What an engine needs to decode a batch, besides its models and prompts (the same for every batch of a run)."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Decoding:
    """How long to generate, how to sample, when to stop, and the clock every time is measured on."""

    max_new: int
    temperature: float
    eos_ids: tuple[int, ...] = ()
    t_start: float = 0.0            # time.perf_counter() at the run's start: times are seconds since then

    def now(self) -> float:
        return time.perf_counter() - self.t_start


@dataclass(frozen=True)
class Drafting:
    """SD's draft side: K tokens a round, token i sampled from sigma_{F_i, C} (plain softmax when C = 1)."""

    k: int
    fanout: tuple[int, ...]
    sampler_c: float = 1.0
