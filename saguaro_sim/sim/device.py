"""One device that SSD's draft and target share (placement "shared"): time-sliced or concurrent.

time-sliced: a simpy Resource of capacity 1; a forward holds the device for its full-speed time, so draft
work and verification serialize (first come, first served). concurrent (MPS / streams): processor sharing;
alone a forward runs at full speed, while two run each progresses at 1/slowdown of it (slowdown 1: perfect
overlap, as on separate devices; 2: no gain over time-slicing). At most two forwards compete (the verifier's
and the one draft device's).
"""

from __future__ import annotations

import simpy

_EPS = 1e-12  # work (s) left below which a forward counts as finished (float rounding of the rate changes)


class SharedDevice:
    """`yield from device.use(seconds)`: run a forward of that full-speed duration on the shared device."""

    def __init__(self, env: simpy.Environment, sharing: str, slowdown: float = 1.0) -> None:
        self.env, self.sharing, self.slowdown = env, sharing, float(slowdown)
        self._lock = simpy.Resource(env, capacity=1) if sharing == "time-sliced" else None
        self._jobs: list[list] = []   # concurrent: [work left (s), event fired when done]
        self._last = 0.0
        self._version = 0

    def use(self, work: float):
        """Occupy the device for `work` seconds of full-speed time (a simpy process body)."""
        if self._lock is not None:
            with self._lock.request() as req:
                yield req
                yield self.env.timeout(work)
            return
        self._advance()
        done = self.env.event()
        self._jobs.append([float(work), done])
        self._reschedule()
        yield done

    def _rate(self) -> float:
        return 1.0 if len(self._jobs) <= 1 else 1.0 / self.slowdown

    def _advance(self) -> None:
        """Charge the time since the last change to every running forward at the current rate."""
        ran = (self.env.now - self._last) * self._rate()
        for job in self._jobs:
            job[0] -= ran
        self._last = self.env.now

    def _reschedule(self) -> None:
        """Finish the forwards with no work left, then wake up when the next one will finish."""
        for job in [j for j in self._jobs if j[0] <= _EPS]:
            self._jobs.remove(job)
            job[1].succeed()
        self._version += 1
        if not self._jobs:
            return
        version = self._version
        wake = self.env.timeout(min(j[0] for j in self._jobs) / self._rate())
        wake.callbacks.append(lambda _ev: self._wake(version))

    def _wake(self, version: int) -> None:
        if version != self._version:   # a forward started or ended since: a newer wake-up is scheduled
            return
        self._advance()
        self._reschedule()
