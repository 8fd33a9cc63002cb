"""Autoregressive and ordinary speculative decoding as simpy processes (the baselines SSD is compared to)."""

from __future__ import annotations

from saguaro_sim.sim.engine import Engine

AR_CHUNK = 32  # AR steps merged into one event when not tracing (latency at the chunk's mid context)


class AREngine(Engine):
    """One target forward per token for the whole batch."""

    def start(self) -> None:
        self.env.process(self._run())

    def _run(self):
        env, st, step = self.env, self.state, self.costs.ar_step
        chunk = 1 if self.events is not None else AR_CHUNK
        while True:
            n = min(chunk, st.steps_to_next_finish())
            b, ctx = st.n_forward, st.mean_context() + (n - 1) / 2
            t = n * step(b, ctx)
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
        env, st, k, costs = self.env, self.state, self.spec.k, self.costs
        while True:
            b, ctx = st.n_forward, st.mean_context()
            t_d = k * costs.draft_step(b, ctx)
            start = env.now
            yield env.timeout(t_d)
            self.draft_busy += t_d
            self.record("draft", "speculator 0", start, t_d, batch=b, k=k)
            t_v = costs.verify(b, ctx)
            start = env.now
            yield env.timeout(t_v)
            self.verify_busy += t_v
            _, added = st.verify_round(env.now, ssd=False)
            self.record("verify", "verifier", start, t_v, batch=b, tokens=added)
            if self.end_round():
                return
