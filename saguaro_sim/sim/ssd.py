"""SSD as simpy processes: the verifier, one speculator per draft device, and the link between them.

Round: the lead speculator (device 0) sends a speculation; the verifier receives it (msg_down), verifies
it (target(b, K+1, L)) and sends the outcome back (msg_up). Meanwhile every draft device builds its share
of the speculation cache (glue forward + K tree steps over ceil(budget / draft_devices) branches). The
lead answers once its cache is built and the outcome has arrived: at once when every sequence hit, after
the backup (neural: K draft steps on device 0; fast: profile.fast_backup_s) when any sequence missed.
If building takes longer than verification, the verifier waits.

push=True models the executor's push protocol: the lead sends its whole cache (one speculation message per
cached branch's worth of bytes) as soon as it is built; after a round in which every sequence hit, the
verifier starts the next verification once that cache has arrived, with no outcome/answer round trip;
after a miss it waits for the backup speculation as before.
"""

from __future__ import annotations

import math

from saguaro_sim.analytic import message_bytes
from saguaro_sim.sim.engine import Engine
from saguaro_sim.sim.link import Link, Mailbox


class SSDEngine(Engine):
    """Verifier + speculator processes exchanging speculations and outcomes over a Link."""

    def __init__(self, *args: object, fast: bool, push: bool = False, **kw: object) -> None:
        super().__init__(*args, **kw)
        env, spec = self.env, self.spec
        self.fast, self.push = fast, push
        self.caches = Mailbox(env)
        self.draft_devices = spec.draft_devices
        self.width = math.ceil(spec.budget / spec.draft_devices)
        self.to_verifier = Mailbox(env)
        self.to_speculator = Mailbox(env)
        self.link = Link(env, self.events)
        self.go = [env.event() for _ in range(spec.draft_devices)]
        self.built = [env.event() for _ in range(spec.draft_devices)]
        self.backup_rounds = 0
        self._msg_cache: dict[tuple[int, int], tuple[int, float]] = {}

    def start(self) -> None:
        self.env.process(self._verifier())
        self.env.process(self._lead())
        for d in range(1, self.draft_devices):
            self.env.process(self._worker(d))

    def _build_s(self, b: int, ctx: float) -> float:
        draft, k = self.profile.draft, self.spec.k
        return draft(b, k + 1, ctx) + k * draft(b, self.width, ctx)

    def _message(self, b: int, down: bool) -> tuple[int, float]:
        """(bytes, seconds) of the speculation (down) or outcome message of a batch of b sequences."""
        got = self._msg_cache.get((b, down))
        if got is None:
            nbytes = message_bytes(self.spec, self.profile.vocab_size, b)[down]
            got = self._msg_cache[(b, down)] = (nbytes, self.profile.message_s(nbytes))
        return got

    def _send_speculation(self, b: int) -> None:
        nbytes, t = self._message(b, True)
        self.link.send(self.to_verifier, None, t, "speculation", nbytes)

    def _cache_message(self, b: int) -> tuple[int, float]:
        """(bytes, seconds) of a pushed cache: the speculation message's bytes for each branch's K tokens."""
        nbytes = self._message(b, True)[0] * max(1, self.width)
        return nbytes, self.profile.message_s(nbytes)

    def _verifier(self):
        env, st, k, target = self.env, self.state, self.spec.k, self.profile.target
        tracing = self.events is not None
        yield self.to_verifier.get()
        while True:
            b, ctx = st.n_active, st.mean_context()
            t_v = target(b, k + 1, ctx)
            start = env.now
            yield env.timeout(t_v)
            self.verify_busy += t_v
            any_miss, added = st.verify_round(env.now, ssd=True)
            if tracing:
                self.record("verify", "verifier", start, t_v, batch=b, tokens=added, any_miss=any_miss)
            if self.end_round():
                return
            nbytes, t = self._message(st.n_active, False)
            self.link.send(self.to_speculator, any_miss, t, "outcome", nbytes)
            if self.profile.verifier_gap_s > 0:   # the verifier's own work between verifications
                yield env.timeout(self.profile.verifier_gap_s)
            if self.push:
                yield self.caches.get()          # this round's cache (arrived during the verification, usually)
                if not any_miss:
                    continue                     # every sequence hit: verify the cached speculation at once
            yield self.to_verifier.get()

    def _lead(self):
        env, st, k = self.env, self.state, self.spec.k
        tracing = self.events is not None
        self._send_speculation(st.n_active)  # the first speculation (drafted before t = 0, not modelled)
        while True:
            b, ctx = st.n_active, st.mean_context()
            t_build = self._build_s(b, ctx)
            start = env.now
            for d in range(1, self.draft_devices):
                self.built[d] = env.event()
                self.go[d].succeed(t_build)
            built_at = start + t_build  # device 0 is busy building until then (no event needed)
            if self.push:                # the cache leaves as soon as every device has built its share
                yield env.timeout(t_build)
                for d in range(1, self.draft_devices):
                    yield self.built[d]
                nbytes, t = self._cache_message(b)
                self.link.send(self.caches, None, t, "cache", nbytes)
            any_miss = yield self.to_speculator.get()
            if env.now < built_at:  # building takes longer than verification: the verifier waits
                yield env.timeout(built_at - env.now)
            if not self.push:
                for d in range(1, self.draft_devices):
                    yield self.built[d]
            self.draft_busy += t_build
            if tracing:
                self.record("build cache", "speculator 0", start, t_build, batch=b, budget=self.spec.budget)
            b, ctx = st.n_active, st.mean_context()
            if any_miss:
                t_b = self.profile.fast_backup_s if self.fast else k * self.profile.draft(b, 1, ctx)
                start = env.now
                yield env.timeout(t_b)
                self.backup_rounds += 1
                if not self.fast:
                    self.draft_busy += t_b
                if tracing:
                    self.record("fast backup" if self.fast else "neural backup", "speculator 0", start, t_b,
                                batch=b)
            if any_miss or not self.push:
                self._send_speculation(b)

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
