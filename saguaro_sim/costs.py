"""Per-round cost functions shared by the closed forms, the simulator and the load planner (seconds).

Each forward costs its microbenchmarked latency (profile.target / profile.draft at the batch width the
executor runs) plus the executor's overhead for that kind of forward (profile.executor, fitted per kind,
greedy vs sampled, and the sigma_{F,C}-sampled kinds apart at C < 1). SSD's cache build on one draft device = glue(K+1) + fork + K tree steps over the branches
the tree holds that round; the draft's own per-round time (profile.executor.draft_round: a line in the batch
width and the q rows it sends where fitted) is added on the draft side: its mean in the closed forms, drawn per round (median plus stall tail) in the simulator, which also
scales each SSD round's verification and build by a measured pair of multipliers (profile.executor.jitter, mean 1:
the closed forms use the means, so they agree with the simulation only where one side clearly binds).
"""

from __future__ import annotations

from dataclasses import dataclass

from calibration.overheads import LOOP_KINDS
from calibration.profile import Profile
from saguaro_sim.config import SpecConfig
from saguaro_sim.resolve import ResolvedSpec, split_width

# the executor's SSD messages (saguaro_exec/speculator/protocol.py; tests check these against it)
OUTCOME_BYTES = 4 * 8  # int64 (accepted k, bonus token, done, stop) per sequence
REPLY_PHASES = 5  # (start, end) time pairs in the reply header's last row
Q_BYTES = 4  # float32 draft probability rows (temperature > 0)


def message_bytes(spec: SpecConfig, vocab_size: int, batch: int) -> tuple[int, int]:
    """(outcome bytes verifier->draft, speculation bytes draft->verifier) for one round of a batch, as the
    executor sends them. Outcome: int64 [B, 4]. Speculation: a float64 header [B + 1, W], W = max(3 + K,
    2 * REPLY_PHASES) (per sequence: hit, bonus rank, from_backup, K tokens; one row of phase times), and at
    temperature > 0 the float32 draft rows [B, K, V] the verifier needs for the residual.
    """
    up = batch * OUTCOME_BYTES
    width = max(3 + spec.k, 2 * REPLY_PHASES)
    rows = batch * spec.k * vocab_size * Q_BYTES if spec.temperature > 0 else 0
    return up, (batch + 1) * width * 8 + rows


@dataclass(frozen=True)
class RoundCosts:
    """Cost of each kind of forward and message for one (profile, spec, resolved spec)."""

    profile: Profile
    spec: SpecConfig
    resolved: ResolvedSpec

    def _over(self, kind: str, batch: int, new_tokens: int) -> float:
        """The executor's overhead of one such forward; a K-step loop's steps (LOOP_KINDS) share its set-up."""
        ex = self.profile.executor
        if ex is None:
            return 0.0
        steps = self.spec.k if kind in LOOP_KINDS else None
        return ex(kind, batch, new_tokens, self.spec.temperature, self.spec.sampler_c, steps)

    def verify(self, batch: int, context: float) -> float:
        """One verification of K+1 tokens per sequence."""
        k = self.spec.k
        return max(0.0, self.profile.target(batch, k + 1, context) + self._over("verify", batch, k + 1))

    def ar_step(self, batch: int, context: float) -> float:
        return max(0.0, self.profile.target(batch, 1, context) + self._over("ar_step", batch, 1))

    def draft_step(self, batch: int, context: float) -> float:
        """One SD draft step (sampling and the draft's catch-up included in the executor's overhead)."""
        return max(0.0, self.profile.draft(batch, 1, context) + self._over("draft_step", batch, 1))

    def sd_round(self, batch: int, context: float) -> float:
        return self.spec.k * self.draft_step(batch, context) + self.verify(batch, context)

    def tree_width(self, from_backup: bool = False, device: int = 0) -> int:
        """Branches per sequence the tree holds on `device` in a round whose speculation came from the
        primary (or, from_backup, the after-miss) schedule: that schedule's total, shared over the devices."""
        r = self.resolved
        total = max(1, sum(r.fanout_miss if from_backup else r.fanout))
        return max(1, split_width(total, len(r.tree_width) or 1)[device])

    def build(self, batch: int, context: float, width: int) -> float:
        """Cache build on one draft device (glue + fork + K tree steps over `width` branches), without the
        draft's per-round time."""
        k, draft = self.spec.k, self.profile.draft
        glue = max(0.0, draft(batch, k + 1, context) + self._over("glue", batch, k + 1))
        tree = max(0.0, draft(batch, width, context) + self._over("tree_step", batch, width))
        return glue + max(0.0, self._over("fork", batch, k + 1)) + k * tree

    def q_rows(self, batch: int, width: int) -> int:
        """Draft distribution rows the draft sends a round at T > 0: the pushed cache's (batch x branches x K),
        in reply the one speculation's (batch x K); none at T = 0."""
        if self.spec.temperature <= 0:
            return 0
        return batch * self.spec.k * (max(1, width) if self.resolved.protocol == "push" else 1)

    def draft_round(self, batch: int = 0, width: int = 0) -> tuple[float, float, float]:
        """(median, stall, stall fraction) of the draft's own per-round time at this batch and tree width
        (zeros when not fitted)."""
        ex = self.profile.executor
        if ex is None:
            return 0.0, 0.0, 0.0
        d = ex.draft_round
        return (ex.draft_round_median(batch, self.q_rows(batch, width)), float(d.get("stall_s", 0.0)),
                float(d.get("stall_frac", 0.0)))

    def jitter(self) -> tuple[tuple[float, float], ...]:
        """Measured (verify, build) multipliers of single SSD rounds (empty when not fitted)."""
        ex = self.profile.executor
        return ex.jitter if ex is not None else ()

    def draft_round_mean(self, batch: int = 0, width: int = 0) -> float:
        m, s, f = self.draft_round(batch, width)
        return m + f * s

    def backup(self, batch: int, context: float, fast: bool) -> float:
        """Backup speculation: fast = profile.fast_backup_s; neural = K draft steps."""
        if fast:
            return self.profile.fast_backup_s
        return self.spec.k * max(0.0, self.profile.draft(batch, 1, context) + self._over("backup_step", batch, 1))

    def message(self, batch: int, down: bool) -> tuple[int, float]:
        """(bytes, seconds) of the speculation (down) or outcome message of a batch."""
        nbytes = message_bytes(self.spec, self.profile.vocab_size, batch)[down]
        return nbytes, self.profile.message_s(nbytes)

    def cache_message(self, batch: int, width: int) -> tuple[int, float]:
        """(bytes, seconds) of a pushed cache: the speculation message's bytes for each branch."""
        nbytes = self.message(batch, True)[0] * max(1, width)
        return nbytes, self.profile.message_s(nbytes)
