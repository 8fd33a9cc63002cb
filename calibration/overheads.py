"""ExecutorCosts: what the real executor spends beyond the microbenchmarked forwards, per kind of forward.

Each kind (``KINDS``) has a plane ``base + per_token * width * new + per_row * width + per_position * new``
(width = the rows the executor really runs, finished rows riding along; new = new tokens per row of that
forward): work per row-token, per row (bookkeeping, masks, sampling set-up that every row pays once) and per
position done once for the whole batch (the executor's loops over the K + 1 verified positions). The K-step
loops (``LOOP_KINDS``: SD's drafting, the tree, the neural backup) may carry a fifth term, ``per_loop``: a
set-up paid once per loop of K steps (charged as per_loop / K per step), since the executor makes every step's
positions, mask, RoPE tables and write index once per loop (engine/decode_steps.py), so a step in a loop costs
less than the microbenchmark's single forward and a loop pays its set-up once. Older profiles' two-number lines
``[base, per_token]`` are the first two terms. Fitted separately for greedy (T = 0)
and sampled (T > 0) runs and extrapolated linearly beyond the fitted range (calibration/fit_executor);
the forwards that sample from sigma_{F,C} (``SIGMA_KINDS``) have a third line for C < 1 (``sampled_c``: the
Saguaro sampler's top-F, scatter and rescale on every sampled row, beyond plain sampling). ``draft_round``: the
draft process's own time per SSD round beyond its forwards (receiving, settling, looking up, sending), as a
median (a line in the batch width and the pushed cache's q rows where fitted: ``per_row_s``, ``per_q_row_s``)
plus a stall tail (``stall_s`` extra in a fraction ``stall_frac`` of rounds). ``jitter``: measured
(verification, cache build) multipliers of single SSD rounds (mean 1 each, drawn as pairs): the two sides overlap,
so a round lasts the longer of the two, and their round-to-round spread lengthens the mean round where they are
balanced (E[max] > max of the means). ``drift``: the machine's slower speed changes within a run, a multiplier every
10 ms of its clock (calibration/fit_drift.py), which the load simulator applies at its own clock (what moves one
request's TPOT against another's). ``after_idle``: the extra share of a round's time at the 1st, 2nd, ... decode
round after the replica sat idle (no live row) for at least IDLE_GAP_S, measured in load-mode runs
(calibration/fit_idle.py: on the 2-vCPU VM the first round after an idle gap ran 1.3-1.6x a steady one and the
excess faded over ~5 rounds). ``prefill`` / ``draft_prefill``: a batched prefill's overhead on the target
/ SD's draft side, tokens = rows x cached prompt tokens (calibration/fit_prefill.py: from the runs' own refills);
``loop``: AR / SD's per-round bookkeeping between rounds, tokens = rows forwarded (calibration/fit_loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from calibration.errors import ConfigError, check_number

KINDS = ("verify", "ar_step", "draft_step", "glue", "fork", "tree_step", "backup_step", "prefill", "draft_prefill",
         "loop")
REGIMES = ("greedy", "sampled", "sampled_c")
_DRAFT_KINDS = ("draft_step", "glue", "fork", "tree_step", "backup_step")
LOOP_KINDS = ("draft_step", "tree_step", "backup_step")  # K steps a round, each step's inputs made once a loop
SIGMA_KINDS = ("draft_step", "tree_step", "backup_step")   # sample from sigma_{F,C}: C < 1 adds work
DRIFT_DT_S = 0.01   # the speed-drift series' time step (s of a run's clock; calibration/fit_drift.py)
IDLE_GAP_S = 0.002  # an idle stretch this long makes the next rounds pay ``after_idle`` (shorter ones did not)


def plane(line: list | tuple, batch: float, new_tokens: float, steps: int | None = None) -> float:
    """One forward's overhead from a line [base, per_token(, per_row, per_position(, per_loop))] at this width;
    ``steps``: the K of the loop this forward is one step of (its set-up, per_loop, is shared over them)."""
    value = line[0] + line[1] * batch * new_tokens
    if len(line) > 2:
        value += line[2] * batch + line[3] * new_tokens
    return value + (line[4] / steps if len(line) > 4 and steps else 0.0)


@dataclass(frozen=True)
class ExecutorCosts:
    """lines[regime][kind] = [base_s, per_token_s] or [base_s, per_token_s, per_row_s, per_position_s] (LOOP_KINDS
    also [..., per_loop_s]; regime greedy | sampled | sampled_c, the last only for SIGMA_KINDS); draft_round =
    {median_s, stall_s, stall_frac}."""

    lines: dict = field(default_factory=dict)
    draft_round: dict = field(default_factory=dict)
    jitter: tuple = ()
    drift: tuple = ()      # the machine's slow speed multipliers every DRIFT_DT_S (calibration/fit_drift.py)
    after_idle: tuple = ()  # extra share of a round's time at each round after an idle gap (calibration/fit_idle.py)

    def __post_init__(self) -> None:
        if not isinstance(self.lines, dict):
            raise ConfigError("profile.executor.lines", f"must be an object, got {type(self.lines).__name__}",
                              "{greedy|sampled: {kind: [base_s, per_token_s]}}")
        for regime, by_kind in self.lines.items():
            if regime not in REGIMES or not isinstance(by_kind, dict):
                raise ConfigError(f"profile.executor.lines.{regime}", "unknown regime or not an object",
                                  " | ".join(REGIMES))
            for kind, line in by_kind.items():
                where = f"profile.executor.lines.{regime}.{kind}"
                allowed = SIGMA_KINDS if regime == "sampled_c" else KINDS
                if kind not in allowed:
                    raise ConfigError(where, "unknown kind", ", ".join(allowed))
                sizes = (2, 4, 5) if kind in LOOP_KINDS else (2, 4)
                if not isinstance(line, list | tuple) or len(line) not in sizes:
                    raise ConfigError(where, f"got {line!r}", "[base_s, per_token_s(, per_row_s, per_position_s"
                                      f"{'(, per_loop_s)' if kind in LOOP_KINDS else ''})]")
                check_number(f"{where}[0]", line[0], -10.0, 10.0)
                for i in range(1, len(line)):
                    check_number(f"{where}[{i}]", line[i], -1.0, 1.0)
        for key in ("median_s", "stall_s", "per_row_s", "per_q_row_s"):
            check_number(f"profile.executor.draft_round.{key}", self.draft_round.get(key, 0.0), 0.0, 10.0)
        check_number("profile.executor.draft_round.stall_frac", self.draft_round.get("stall_frac", 0.0), 0.0, 1.0)
        if not isinstance(self.jitter, list | tuple):
            raise ConfigError("profile.executor.jitter", f"must be a list, got {type(self.jitter).__name__}",
                              "[[verify multiplier, build multiplier], ...]")
        pairs = []
        for i, pair in enumerate(self.jitter):
            if not isinstance(pair, list | tuple) or len(pair) != 2:
                raise ConfigError(f"profile.executor.jitter[{i}]", f"got {pair!r}", "[verify multiplier, build multiplier]")
            pairs.append((float(check_number(f"profile.executor.jitter[{i}][0]", pair[0], 0.0, 20.0)),
                          float(check_number(f"profile.executor.jitter[{i}][1]", pair[1], 0.0, 20.0))))
        object.__setattr__(self, "jitter", tuple(pairs))
        if not isinstance(self.drift, list | tuple):
            raise ConfigError("profile.executor.drift", f"must be a list, got {type(self.drift).__name__}",
                              "[multiplier, ...]")
        object.__setattr__(self, "drift", tuple(float(check_number(f"profile.executor.drift[{i}]", v, 0.0, 20.0,
                                                                   lo_open=True))
                                                for i, v in enumerate(self.drift)))
        if not isinstance(self.after_idle, list | tuple):
            raise ConfigError("profile.executor.after_idle", f"must be a list, got {type(self.after_idle).__name__}",
                              "[extra share of the 1st round after idle, of the 2nd, ...]")
        object.__setattr__(self, "after_idle", tuple(float(check_number(f"profile.executor.after_idle[{i}]", v, 0.0,
                                                                        10.0)) for i, v in enumerate(self.after_idle)))

    def __call__(self, kind: str, batch: int, new_tokens: int, temperature: float = 0.0,
                 sampler_c: float = 1.0, steps: int | None = None) -> float:
        """Overhead (s; negative when the executor beats the microbenchmark) of one forward of this kind at
        this width (``steps``: the K of its loop, for LOOP_KINDS); a kind fitted in one regime only uses that
        regime's line (0 when never fitted); at T > 0 with C < 1 the ``sampled_c`` line where fitted, else the
        sampled one."""
        regime, other = ("sampled", "greedy") if temperature > 0 else ("greedy", "sampled")
        line = self.lines.get("sampled_c", {}).get(kind) if temperature > 0 and sampler_c < 1 else None
        line = line or self.lines.get(regime, {}).get(kind) or self.lines.get(other, {}).get(kind)
        return 0.0 if line is None else plane(line, batch, new_tokens, steps)

    def with_draft_round(self, draft_round: dict) -> ExecutorCosts:
        """A copy with the draft's per-round time replaced."""
        return replace(self, draft_round=dict(draft_round))

    def with_jitter(self, jitter: list | tuple) -> ExecutorCosts:
        """A copy with the per-round (verify, build) multipliers replaced."""
        return replace(self, jitter=tuple(jitter))

    def with_drift(self, drift: list | tuple) -> ExecutorCosts:
        """A copy with the slow speed-drift series replaced."""
        return replace(self, drift=tuple(drift))

    def with_after_idle(self, after_idle: list | tuple) -> ExecutorCosts:
        """A copy with the per-round extra shares after an idle gap replaced."""
        return replace(self, after_idle=tuple(after_idle))

    def draft_round_median(self, width: int = 0, q_rows: int = 0) -> float:
        """Median draft-side time of a round forwarding `width` rows whose pushed cache carries `q_rows` draft
        distribution rows: median_s + per_row_s * width + per_q_row_s * q_rows (the last two fitted only
        where the calibration runs spanned several; absent: the plain median)."""
        d = self.draft_round
        return (float(d.get("median_s", 0.0)) + float(d.get("per_row_s", 0.0)) * width
                + float(d.get("per_q_row_s", 0.0)) * q_rows)

    def draft_round_mean(self, width: int = 0, q_rows: int = 0) -> float:
        """Mean per-round draft-side overhead: the median at (width, q_rows) + stall_frac * stall_s."""
        d = self.draft_round
        return self.draft_round_median(width, q_rows) + float(d.get("stall_frac", 0.0)) * float(d.get("stall_s", 0.0))

    def to_dict(self) -> dict:
        d = {"lines": {r: {k: list(v) for k, v in by.items()} for r, by in self.lines.items()},
             "draft_round": dict(self.draft_round)}
        if self.jitter:      # written only when fitted (older profiles have none)
            d["jitter"] = [list(p) for p in self.jitter]
        if self.drift:
            d["drift"] = list(self.drift)
        if self.after_idle:
            d["after_idle"] = list(self.after_idle)
        return d

    @classmethod
    def from_dict(cls, d: object) -> ExecutorCosts | None:
        if d is None:
            return None
        if not isinstance(d, dict):
            raise ConfigError("profile.executor", f"must be an object, got {type(d).__name__}", "{lines, draft_round}")
        unknown = sorted(set(d) - {"lines", "draft_round", "jitter", "drift", "after_idle"})
        if unknown:
            raise ConfigError(f"profile.executor.{unknown[0]}", "unknown key",
                              "lines, draft_round, jitter, drift, after_idle")
        drift, idle = d.get("drift", ()), d.get("after_idle", ())
        return cls(lines=dict(d.get("lines", {})), draft_round=dict(d.get("draft_round", {})),
                   jitter=tuple(d.get("jitter", ())), drift=tuple(drift) if isinstance(drift, list | tuple) else drift,
                   after_idle=tuple(idle) if isinstance(idle, list | tuple) else idle)
