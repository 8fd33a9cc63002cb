"""Closed forms for SD and SSD (Theorem 7, Corollary 16, b*) and a cheap `predict` for any SpecConfig.

Time model (shared with the simulator through saguaro_sim/costs.py; seconds): every forward is its
microbenchmarked latency plus the executor's overhead for that kind; verify = verify(b, K+1, L); SD round =
K draft steps + verify; SSD cache build on each draft device = glue + fork + K tree steps over the branches of
that round's schedule (resolve.py) + the draft's own per-round time (mean); neural backup = K draft steps;
fast backup = profile.fast_backup_s; the sender of a message is busy for profile.message_s(bytes). With the
draft on the target's device (placement "shared") device work competes: saguaro_sim/shared.py.
Probability model: accepted lengths from profile.acceptance (a fast-backup speculation's from
profile.fast_backup_acceptance, none accepted when absent); P(hit) from profile.hits at the fan-out
allocated at each accepted length, the all-accepted outcome k = K from its own entry.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from calibration.errors import ConfigError, check_number
from calibration.profile import Profile
from saguaro_sim.config import SpecConfig
from saguaro_sim.costs import OUTCOME_BYTES, Q_BYTES, REPLY_PHASES, RoundCosts, message_bytes
from saguaro_sim.resolve import ResolvedSpec, hit_exponent, resolve, resolve_fanouts
from saguaro_sim.shared import shared_round_time
from saguaro_sim.workload import Workload

__all__ = ["OUTCOME_BYTES", "Q_BYTES", "REPLY_PHASES", "hit_exponent", "message_bytes", "resolve_fanouts"]


# ---- pure closed forms (normalized or in seconds, no profile) ---------------------------------------
def sd_expected_tokens(alpha: float, k: int) -> float:
    """E[tokens per SD round] = (1 - alpha^(K+1)) / (1 - alpha) under i.i.d. acceptance alpha."""
    check_number("alpha", alpha, 0.0, 1.0)
    check_number("k", k, 0, 4096, integer=True)
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def sd_speedup(alpha: float, k: int, t_draft: float, t_verify: float = 1.0, t_ar: float | None = None) -> float:
    """SD speedup over AR: E[tokens] * t_ar / (K * t_draft + t_verify); t_ar defaults to t_verify."""
    check_number("t_draft", t_draft, 0.0)
    check_number("t_verify", t_verify, 0.0, lo_open=True)
    t_ar = t_verify if t_ar is None else check_number("t_ar", t_ar, 0.0, lo_open=True)
    return sd_expected_tokens(alpha, k) * t_ar / (k * t_draft + t_verify)


def ssd_speedup(p_hit: float, e_hit: float, e_miss: float, t_p: float, t_b: float, batch: int = 1) -> float:
    """Theorem 7 (batch 1) / Corollary 16 (batch b): times normalized by one verification (T_v = 1).

    speedup = [p E_hit + (1-p) E_miss] / [p^b max(1, T_p) + (1 - p^b)(1 + T_b)]
    """
    check_number("p_hit", p_hit, 0.0, 1.0)
    check_number("e_hit", e_hit, 0.0)
    check_number("e_miss", e_miss, 0.0)
    check_number("t_p", t_p, 0.0)
    check_number("t_b", t_b, 0.0)
    check_number("batch", batch, 1, 1_000_000, integer=True)
    q = p_hit ** batch
    return (p_hit * e_hit + (1 - p_hit) * e_miss) / (q * max(1.0, t_p) + (1 - q) * (1.0 + t_b))


def stationary_p_hit(h_primary: float, h_backup: float) -> float:
    """Stationary P(hit) of the primary/backup chain: a hit makes the next speculation primary.

    h_primary = P(hit | verified speculation came from the cache), h_backup = P(hit | it came from the
    backup); P(hit) = h_b / (1 - h_p + h_b) (1 when h_p = 1: a sequence starts on a primary speculation).
    """
    den = 1.0 - h_primary + h_backup
    return 1.0 if den <= 1e-15 else h_backup / den


# ---- profile-based pieces shared with the simulator ----------------------------------------------
def sd_round_time(profile: Profile, k: int, batch: int = 1, context: float = 0.0, temperature: float = 0.0) -> float:
    """Seconds for one SD round: K sequential draft steps, then one verification of K+1 tokens."""
    check_number("k", k, 1, 4096, integer=True)
    spec = SpecConfig(mode="sd", k=k, temperature=temperature)
    return RoundCosts(profile, spec, resolve(spec, profile)).sd_round(batch, context)


def fast_backup_pmf(profile: Profile, k: int, temperature: float) -> np.ndarray:
    """Accepted-length pmf (0..k) of a fast-backup speculation: from profile.fast_backup_acceptance when
    measured (the n-gram proposer is sometimes accepted in full), else nothing accepted."""
    if profile.fast_backup_acceptance is not None:
        return profile.fast_backup_acceptance.length_pmf(k, temperature)
    delta = np.zeros(k + 1)
    delta[0] = 1.0
    return delta


def accept_pmfs(profile: Profile, spec: SpecConfig, fast: bool) -> tuple[np.ndarray, np.ndarray]:
    """Accepted-length pmfs (0..K) of a primary speculation and of a backup one (see fast_backup_pmf)."""
    pmf = profile.acceptance.length_pmf(spec.k, spec.temperature, spec.sampler_c)
    return (pmf, fast_backup_pmf(profile, spec.k, spec.temperature)) if fast else (pmf, pmf)


def hit_table(profile: Profile, spec: SpecConfig, fast: bool | None = None) -> np.ndarray:
    """hit[s, k]: P(hit) when the verified speculation came from source s (0 primary, 1 backup) and k
    tokens were accepted, using the fan-out actually allocated at k (primary or after-miss schedule);
    k = K reads the hit curve's all-accepted entry. ``fast``: the backup is the n-gram's (None: resolve it)."""
    primary, after_miss = resolve_fanouts(profile, spec)
    h = profile.hits.hit
    fast = uses_fast_backup(profile, spec) if fast is None else fast
    t, c, k_max = spec.temperature, spec.sampler_c, spec.k
    return np.array([[h(primary[k], k, t, False, c, k_max) for k in range(k_max + 1)],
                     [h(after_miss[k], k, t, True, c, k_max, fast) for k in range(k_max + 1)]])


def expected_p_hit(profile: Profile, spec: SpecConfig, fanout: tuple[int, ...] | None = None,
                   backup: bool = False, fast: bool | None = None) -> float:
    """sum_k P_k * hit(F_k, k) for one speculation source; fanout defaults to the spec's schedule."""
    if fast is None:
        fast = spec.backup == "fast"
    pmf = accept_pmfs(profile, spec, fast)[1 if backup else 0]
    if fanout is None:
        fanout = resolve_fanouts(profile, spec)[1 if backup else 0]
    if len(fanout) != spec.k + 1:
        raise ConfigError("fanout", f"has {len(fanout)} entries but k = {spec.k} needs {spec.k + 1}",
                          f"list of k+1 = {spec.k + 1} integers >= 0")
    h = profile.hits.hit
    return float(sum(pmf[k] * h(fanout[k], k, spec.temperature, backup, spec.sampler_c, spec.k, fast)
                     for k in range(spec.k + 1) if pmf[k] > 0))


@dataclass(frozen=True)
class RoundTimes:
    """Phase times (s) of one round at a given batch and context."""

    verify: float
    ar_step: float
    draft_step: float
    build: float       # SSD cache build on the busiest draft device, primary schedule, with the draft's round time
    backup: float
    msg_up: float
    msg_down: float
    build_miss: float = 0.0   # the same when some row's speculation came from the backup (after-miss schedule)
    msg_cache: float = 0.0    # push: the pushed cache
    push: bool = False
    lookup: float = 0.0       # push: the verifier receiving the cache and looking the outcome up
    sharing: str = "none"     # SSD's draft on the target's device: "time-sliced" | "concurrent" (shared.py)
    slowdown: float = 1.0     # concurrent: each of draft and target this many times slower while both run


def round_times(profile: Profile, spec: SpecConfig, batch: int, context: float, fast: bool,
                resolved: ResolvedSpec | None = None) -> RoundTimes:
    """Evaluate the time model for one round (see module docstring)."""
    if resolved is None:   # backup given by `fast` (an "auto" spec would ask the closed forms for b*)
        resolved = resolve(spec.replace(backup="fast" if fast else "neural") if spec.mode == "ssd" else spec,
                           profile, batch_size=batch, protocol="reply")
    rs = resolved
    c = RoundCosts(profile, spec, rs)
    verify = c.verify(batch, context) if spec.mode != "ar" else c.ar_step(batch, context)
    build = build_miss = backup = up = down = cache = 0.0
    if spec.mode == "ssd":
        wide = max(c.tree_width(False), c.tree_width(True))
        build = c.build(batch, context, c.tree_width(False)) + c.draft_round_mean(batch, c.tree_width(False))
        build_miss = c.build(batch, context, wide) + c.draft_round_mean(batch, wide)
        backup = c.backup(batch, context, fast)
        up, down = c.message(batch, False)[1], c.message(batch, True)[1]
        cache = c.cache_message(batch, c.tree_width(False))[1] if rs.protocol == "push" else 0.0
    push = spec.mode == "ssd" and rs.protocol == "push"
    return RoundTimes(verify, c.ar_step(batch, context), c.draft_step(batch, context), build, backup, up, down,
                      build_miss or build, cache, push, profile.verifier_gap_s if push else 0.0,
                      rs.sharing if spec.mode == "ssd" else "none", rs.slowdown)


def ssd_round_time(rt: RoundTimes, p_hit: float, batch: int) -> float:
    """E[SSD round time] with per-sequence hits independent, P(hit) = p_hit each (Corollary 16, general).

    Senders are busy while they send. Reply: the speculator answers once its cache is built and the outcome
    has arrived, max(V + up, T_p), then sends the speculation (+ down); if any sequence of the batch missed,
    the backup comes first (+ T_b). With T_p <= V + up this is Corollary 16's denominator p^b max(1, T_p) +
    (1 - p^b)(1 + T_b). Push: an all-hit round is max(V + up, T_p + cache send); a round with a miss adds the
    backup and its speculation's send; the verifier's lookup in the received cache (L = verifier_gap_s)
    follows the cache's arrival and overlaps the next build: hit rounds max(V + up + L, T_p + cache), miss
    rounds max(V + up, T_p + cache) + max(L, T_b + down). A round after a miss builds the after-miss tree.
    """
    q = p_hit ** batch
    if rt.sharing != "none":   # the draft shares the target's device (saguaro_sim/shared.py)
        return shared_round_time(rt, q)
    if rt.push:   # the verifier's lookup overlaps the draft's next build (it already has the outcome)
        hit = max(rt.verify + rt.msg_up + rt.lookup, rt.build + rt.msg_cache)
        miss = max(rt.verify + rt.msg_up, rt.build_miss + rt.msg_cache) + max(rt.lookup, rt.backup + rt.msg_down)
        return q * hit + (1.0 - q) * miss
    build = q * rt.build + (1 - q) * rt.build_miss
    return max(rt.verify + rt.msg_up, build) + rt.msg_down + (1.0 - q) * rt.backup


# ---- predict ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prediction:
    """Closed-form estimate for one SpecConfig at the workload's mean context (per sequence unless noted)."""

    tokens_per_round: float
    round_time_s: float
    tokens_per_s_per_seq: float
    throughput: float
    p_hit: float
    t_p_s: float
    t_b_s: float
    t_verify_s: float
    speedup_vs_ar: float
    backup: str

    def to_dict(self) -> dict:
        return asdict(self)


def mean_context(workload: Workload) -> float:
    """Mean context length over a sequence's decode: prompt + output / 2."""
    return workload.prompt_tokens + workload.output_tokens / 2


def _ssd_parts(profile: Profile, spec: SpecConfig, fast: bool) -> tuple[float, float]:
    """(stationary p_hit, expected tokens per round) for SSD with the given backup kind."""
    pmf_p, pmf_b = accept_pmfs(profile, spec, fast)
    table = hit_table(profile, spec, fast)
    h_p, h_b = float(pmf_p @ table[0]), float(pmf_b @ table[1])
    p = stationary_p_hit(h_p, h_b)
    n = np.arange(spec.k + 1) + 1.0
    return p, p * float(pmf_p @ n) + (1 - p) * float(pmf_b @ n)


def _ssd_rate(profile: Profile, spec: SpecConfig, batch: int, context: float, fast: bool,
              parts: tuple[float, float], protocol: str = "auto") -> tuple[float, float, RoundTimes]:
    p, tokens = parts
    one = spec.replace(backup="fast" if fast else "neural")
    rt = round_times(profile, one, batch, context, fast, resolve(one, profile, batch_size=batch, protocol=protocol))
    t = ssd_round_time(rt, p, batch)
    return tokens / t, t, rt


def critical_batch_size(profile: Profile, spec: SpecConfig, workload: Workload | None = None,
                        max_batch: int = 256) -> int | None:
    """b*: smallest batch size at which the fast backup beats the neural one (Corollary 16 with this
    profile's latencies, at the workload's mean context; default Workload()); None if it never does up to
    max_batch (Theorem 17: neural below b*, fast above)."""
    context = mean_context(workload or Workload())
    fast_parts, neural_parts = _ssd_parts(profile, spec, True), _ssd_parts(profile, spec, False)
    for b in range(1, max_batch + 1):
        if (_ssd_rate(profile, spec, b, context, True, fast_parts)[0]
                > _ssd_rate(profile, spec, b, context, False, neural_parts)[0]):
            return b
    return None


def uses_fast_backup(profile: Profile, spec: SpecConfig, workload: Workload | None = None) -> bool:
    """spec.backup as resolve() settles it ("auto": fast iff batch_size >= b*); workload is not used (the
    resolver's choice does not depend on it, so planner and executor agree)."""
    return resolve(spec, profile).backup == "fast"


def predict(profile: Profile, spec: SpecConfig, workload: Workload, protocol: str = "auto") -> Prediction:
    """Closed-form tokens/s for AR, SD or SSD at the workload's mean context (cheap: for pruning)."""
    b, context = spec.batch_size, mean_context(workload)
    rs = resolve(spec, profile, protocol=protocol)
    costs = RoundCosts(profile, spec, rs)
    t_ar = RoundCosts(profile, SpecConfig(mode="ar", k=0, temperature=spec.temperature), rs).ar_step(b, context)
    if spec.mode == "ar":
        return Prediction(1.0, t_ar, 1 / t_ar, b / t_ar, 0.0, 0.0, 0.0, t_ar, 1.0, "none")
    if spec.mode == "sd":
        tokens = profile.acceptance.expected_tokens(spec.k, spec.temperature, spec.sampler_c)
        t = costs.sd_round(b, context)
        return Prediction(tokens, t, tokens / t, b * tokens / t, 0.0, 0.0, 0.0, costs.verify(b, context),
                          tokens / t * t_ar, "none")
    fast = rs.backup == "fast"
    parts = _ssd_parts(profile, spec, fast)
    rate, t, rt = _ssd_rate(profile, spec, b, context, fast, parts, rs.protocol)
    return Prediction(parts[1], t, rate, b * rate, parts[0], rt.build, rt.backup, rt.verify, rate * t_ar,
                      rs.backup)
