"""Autoregressive and ordinary speculative decoding as simpy processes (the baselines SSD is compared to)."""

from __future__ import annotations

from saguaro_sim.sim.engine import Engine

AR_CHUNK = 32  # AR steps merged into one event when not tracing (latency at the chunk's mid context)


class AREngine(Engine):
    """One target forward per token for the whole batch."""

    def start(self) -> None:
        self.env.process(self._run())

    def _run(self):
        env, st, target = self.env, self.state, self.profile.target
        chunk = 1 if self.events is not None else AR_CHUNK
        while True:
            n = min(chunk, st.steps_to_next_finish())
            b, ctx = st.n_active, st.mean_context() + (n - 1) / 2
            t = n * target(b, 1, ctx)
            start = env.now
            yield env.timeout(t)
            self.verify_busy += t
            st.ar_steps(n, env.now)
            self.record("decode", "verifier", start, t, batch=b, steps=n)
            self.rounds += n - 1
            if self.end_round():
                return


class SDEngine(Engine):
    """SD: K sequential draft steps, then one verification of K+1 tokens; draft and target never overlap."""

    def start(self) -> None:
        self.env.process(self._run())

    def _run(self):
        env, st, k = self.env, self.state, self.spec.k
        draft, target = self.profile.draft, self.profile.target
        while True:
            b, ctx = st.n_active, st.mean_context()
            t_d = k * draft(b, 1, ctx)
            start = env.now
            yield env.timeout(t_d)
            self.draft_busy += t_d
            self.record("draft", "speculator 0", start, t_d, batch=b, k=k)
            t_v = target(b, k + 1, ctx)
            start = env.now
            yield env.timeout(t_v)
            self.verify_busy += t_v
            _, added = st.verify_round(env.now, ssd=False)
            self.record("verify", "verifier", start, t_v, batch=b, tokens=added)
            if self.end_round():
                return
