"""SSD as simpy processes: the verifier, one speculator per draft device, and the link between them.

Round: the verifier verifies the speculation (verify(b, K+1, L)) and sends the outcome (busy for the outcome
message's time, as the executor's send is). Meanwhile every draft device builds its share of the cache
(glue + fork + K tree steps over the branches of the schedule the outstanding speculation uses; after a
miss the after-miss schedule's; round r's verification and build scaled by the r-th pair of measured
multipliers drawn from profile.executor.jitter, when fitted), and the lead (device 0) adds its own per-round time (profile.executor's
draft_round: median at the round's width and q rows, plus a stall drawn in a fraction of rounds). Reply protocol: the lead answers once its
cache is built and the outcome has arrived: at once when every sequence hit, after the backup (neural: K
draft steps; fast: profile.fast_backup_s) when any sequence missed, busy while sending the speculation. If
building takes longer than verification, the verifier waits.

push=True models the executor's push protocol: the lead sends its whole cache (the speculation message's
bytes per branch) as soon as it is built; the verifier receives it and looks the outcome up
(profile.verifier_gap_s); after a round in which every sequence hit it starts the next verification at once,
with no round trip; after a miss it waits for the backup speculation as in reply.

Placement "shared" (resolve.py): the verification, the cache build (with the draft's own round time) and the
neural backup run on one SharedDevice (sim/device.py), time-sliced or concurrent; messages, the fast backup
and the verifier's lookup are host work and do not occupy it. "separate" keeps the plain timeouts.
"""

from __future__ import annotations

import numpy as np

from saguaro_sim.sim.device import SharedDevice
from saguaro_sim.sim.engine import Engine
from saguaro_sim.sim.link import Link, Mailbox


class SSDEngine(Engine):
    """Verifier + speculator processes exchanging speculations and outcomes over a Link."""

    def __init__(self, *args: object, fast: bool, push: bool = False, build_scale: float = 1.0,
                 **kw: object) -> None:
        super().__init__(*args, **kw)
        env = self.env
        self.fast, self.push, self.build_scale = fast, push, build_scale
        self.caches = Mailbox(env)
        self.draft_devices = max(1, len(self.costs.resolved.tree_width))
        self.to_verifier = Mailbox(env)
        self.to_speculator = Mailbox(env)
        self.link = Link(env, self.events)
        self.go = [env.event() for _ in range(self.draft_devices)]
        self.built = [env.event() for _ in range(self.draft_devices)]
        self.backup_rounds = 0
        self._round = self.costs.draft_round()
        self._medians: dict[tuple[int, bool], float] = {}   # the median per (width, after a miss)
        stalls = self._round[1] > 0 and self._round[2] > 0
        self._stall_rng = np.random.default_rng(int(self.state.rng.integers(2**62))) if stalls else None
        self._stalls: list[bool] = []
        self._jitter = self.costs.jitter()
        self._jitter_rng = np.random.default_rng(int(self.state.rng.integers(2**62))) if self._jitter else None
        self._draws: list[int] = []      # round r's (verify, build) pair: index draws[r] into the jitter table
        self._v_round = self._b_round = 0
        rs = self.costs.resolved
        self.device = SharedDevice(env, rs.sharing, rs.slowdown) if rs.sharing != "none" else None

    def start(self) -> None:
        self.env.process(self._verifier())
        self.env.process(self._lead())
        for d in range(1, self.draft_devices):
            self.env.process(self._worker(d))

    def _build_s(self, b: int, ctx: float, from_backup: bool, device: int = 0) -> float:
        return self.costs.build(b, ctx, self.costs.tree_width(from_backup, device)) * self.build_scale

    def _draft_round_s(self, b: int, from_backup: bool) -> float:
        """The lead's own time this round: the median (at this width and tree), plus a stall in a stall_frac
        share of rounds."""
        _, stall, frac = self._round
        median = self._medians.get((b, from_backup))
        if median is None:
            median = self._medians[b, from_backup] = self.costs.draft_round(b, self.costs.tree_width(from_backup))[0]
        if self._stall_rng is None:
            return median
        if not self._stalls:
            self._stalls = (self._stall_rng.random(1024) < frac).tolist()
        return median + (stall if self._stalls.pop() else 0.0)

    def _jit(self, r: int, side: int) -> float:
        """Round r's multiplier of the verification (side 0) or the build (side 1): 1 without a jitter table."""
        if self._jitter_rng is None:
            return 1.0
        while len(self._draws) <= r:
            self._draws += self._jitter_rng.integers(len(self._jitter), size=1024).tolist()
        return self._jitter[self._draws[r]][side]

    def _compute(self, seconds: float):
        """Device work: a plain wait on separate devices, a turn on the shared device otherwise."""
        if self.device is None:
            yield self.env.timeout(seconds)
        else:
            yield from self.device.use(seconds)

    def _send_speculation(self, b: int):
        nbytes, t = self.costs.message(b, True)
        if t > 0:
            yield self.env.timeout(t)
        self.link.deliver(self.to_verifier, None, t, "speculation", nbytes)

    def _verifier(self):
        env, st, costs = self.env, self.state, self.costs
        tracing = self.events is not None
        yield self.to_verifier.get()
        while True:
            b, ctx = st.n_forward, st.mean_context()
            t_v = costs.verify(b, ctx) * self._jit(self._v_round, 0)
            self._v_round += 1
            start = env.now
            yield from self._compute(t_v)
            self.verify_busy += t_v
            any_miss, added = st.verify_round(env.now, ssd=True)
            if tracing:
                self.record("verify", "verifier", start, t_v, batch=b, tokens=added, any_miss=any_miss)
            if self.end_round():
                return
            nbytes, t = costs.message(st.n_forward, False)
            if t > 0:
                yield env.timeout(t)             # the verifier's own work between verifications: the send
            self.link.deliver(self.to_speculator, any_miss, t, "outcome", nbytes)
            if self.push:
                yield self.caches.get()          # this round's cache (arrived during the verification, usually)
                if self.profile.verifier_gap_s > 0:   # receiving it and looking the outcome up: verifier work
                    yield env.timeout(self.profile.verifier_gap_s)
                if not any_miss:
                    continue                     # every sequence hit: verify the cached speculation at once
            yield self.to_verifier.get()

    def _lead(self):
        env, st = self.env, self.state
        tracing = self.events is not None
        first = self.costs.message(st.n_forward, True)   # the first speculation (drafted before t = 0)
        self.link.send(self.to_verifier, None, first[1], "speculation", first[0])
        while True:
            b, ctx, from_backup = st.n_forward, st.mean_context(), st.any_from_backup()
            t_build = self._build_s(b, ctx, from_backup) * self._jit(self._b_round, 1) + self._draft_round_s(b, from_backup)
            self._b_round += 1
            start = env.now
            for d in range(1, self.draft_devices):
                self.built[d] = env.event()
                self.go[d].succeed(self._build_s(b, ctx, from_backup, d))
            built_at = start + t_build  # device 0 is busy building until then (no event needed)
            building = env.process(self.device.use(t_build)) if self.device is not None else None
            if self.push:                # the cache leaves as soon as every device has built its share
                yield building if building is not None else env.timeout(t_build)
                for d in range(1, self.draft_devices):
                    yield self.built[d]
                nbytes, t = self.costs.cache_message(b, self.costs.tree_width(from_backup))
                if t > 0:
                    yield env.timeout(t)
                self.link.deliver(self.caches, None, t, "cache", nbytes)
            any_miss = yield self.to_speculator.get()
            if building is not None:
                yield building          # (at once when already built)
            elif env.now < built_at:  # building takes longer than verification: the verifier waits
                yield env.timeout(built_at - env.now)
            if not self.push:
                for d in range(1, self.draft_devices):
                    yield self.built[d]
            self.draft_busy += t_build
            if tracing:
                self.record("build cache", "speculator 0", start, t_build, batch=b, budget=self.spec.budget)
            b, ctx = st.n_forward, st.mean_context()
            if any_miss:
                t_b = self.costs.backup(b, ctx, self.fast)
                start = env.now
                if self.fast:
                    yield env.timeout(t_b)   # the fast backup is host work
                else:
                    yield from self._compute(t_b)
                self.backup_rounds += 1
                if not self.fast:
                    self.draft_busy += t_b
                if tracing:
                    self.record("fast backup" if self.fast else "neural backup", "speculator 0", start, t_b,
                                batch=b)
            if any_miss or not self.push:
                yield from self._send_speculation(b)

    def _worker(self, d: int):
        env, track = self.env, f"speculator {d}"
        while True:
            t_build = yield self.go[d]
            self.go[d] = env.event()
            start = env.now
            yield env.timeout(t_build)
            self.draft_busy += t_build
            self.record("build cache", track, start, t_build)
            self.built[d].succeed()
