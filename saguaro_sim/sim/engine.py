"""Shared plumbing of the simulated decoders: clock, batch state, busy-time counters, timeline, progress."""

from __future__ import annotations

import simpy

from calibration.profile import Profile
from saguaro_sim.config import SpecConfig
from saguaro_sim.costs import RoundCosts
from saguaro_sim.sim.batch import BatchState

_PROGRESS_EVERY = 64  # rounds between progress-bar updates


class Engine:
    """Base of the AR / SD / SSD decoders: owns the simpy environment and the counters they fill."""

    def __init__(self, env: simpy.Environment, profile: Profile, spec: SpecConfig, state: BatchState,
                 events: list | None, progress: object | None = None, costs: RoundCosts | None = None) -> None:
        self.env, self.profile, self.spec, self.state = env, profile, spec, state
        if costs is None:
            from saguaro_sim.resolve import resolve

            costs = RoundCosts(profile, spec, resolve(spec, profile))
        self.costs = costs
        self.events = events
        self.progress = progress
        self.done = env.event()
        self.rounds = 0
        self.verify_busy = 0.0
        self.draft_busy = 0.0
        self.draft_devices = 1
        self._reported = 0

    def record(self, name: str, track: str, start: float, dur: float, **args: object) -> None:
        """Append one timeline event (only when tracing)."""
        if self.events is not None:
            self.events.append({"name": name, "track": track, "start_s": start, "dur_s": dur, "args": args})

    def end_round(self) -> bool:
        """Count a round, update progress; True (and the done event fires) once every sequence finished."""
        self.rounds += 1
        if self.progress is not None and (self.rounds % _PROGRESS_EVERY == 0 or self.state.finished):
            self.progress.update(self.state.tokens - self._reported)
            self._reported = self.state.tokens
        if self.state.finished:
            self.done.succeed()
            return True
        return False

    def start(self) -> None:
        """Register the simpy processes (subclasses)."""
        raise NotImplementedError
