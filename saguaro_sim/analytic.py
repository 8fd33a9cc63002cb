"""Closed forms for SD and SSD (Theorem 7, Corollary 16, b*) and a cheap `predict` for any SpecConfig.

Time model (shared with the simulator; seconds): verify = target(b, K+1, L); AR step = target(b, 1, L);
SD round = K * draft(b, 1, L) + verify; SSD cache build on each draft device = draft(b, K+1, L) (glue)
+ K * draft(b, ceil(budget / draft_devices), L) (tree steps); neural backup = K * draft(b, 1, L); fast
backup = profile.fast_backup_s; one message each way = profile.message_s(bytes). L = mean context.
Probability model: accepted lengths from profile.acceptance (a fast-backup speculation's from
profile.fast_backup_acceptance, none accepted when absent); P(hit) from profile.hits at the fan-out
allocated at each accepted length, the all-accepted outcome k = K from its own entry.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from calibration.errors import ConfigError, check_number
from calibration.interp import pick_temperature
from calibration.profile import Profile
from saguaro_sim.config import SpecConfig
from saguaro_sim.workload import Workload

# the executor's SSD messages (saguaro_exec/speculator/protocol.py; tests/test_exec_tp.py checks these against it)
OUTCOME_BYTES = 4 * 8  # int64 (accepted k, bonus token, done, stop) per sequence
REPLY_PHASES = 5  # (start, end) time pairs in the reply header's last row
Q_BYTES = 4  # float32 draft probability rows (temperature > 0)


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
def sd_round_time(profile: Profile, k: int, batch: int = 1, context: float = 0.0) -> float:
    """Seconds for one SD round: K sequential draft steps, then one verification of K+1 tokens."""
    check_number("k", k, 1, 4096, integer=True)
    return k * profile.draft(batch, 1, context) + profile.target(batch, k + 1, context)


def hit_exponent(profile: Profile, temperature: float) -> float:
    """Power-law exponent r of the primary miss curve at this temperature (for geometric fan-out)."""
    lo, hi, w = pick_temperature(profile.hits.by_temperature, temperature)
    return (1 - w) * lo["primary"]["r"] + w * hi["primary"]["r"]


def resolve_fanouts(profile: Profile, spec: SpecConfig) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Concrete (primary, after-miss) fan-outs F_0..F_K for spec on this profile."""
    alpha = profile.acceptance.mean_alpha(spec.k, spec.temperature, spec.sampler_c)
    return spec.resolve_fanout(alpha, hit_exponent(profile, spec.temperature))


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


def hit_table(profile: Profile, spec: SpecConfig) -> np.ndarray:
    """hit[s, k]: P(hit) when the verified speculation came from source s (0 primary, 1 backup) and k
    tokens were accepted, using the fan-out actually allocated at k (primary or after-miss schedule);
    k = K reads the hit curve's all-accepted entry."""
    primary, after_miss = resolve_fanouts(profile, spec)
    h = profile.hits.hit
    t, c, k_max = spec.temperature, spec.sampler_c, spec.k
    return np.array([[h(primary[k], k, t, False, c, k_max) for k in range(k_max + 1)],
                     [h(after_miss[k], k, t, True, c, k_max) for k in range(k_max + 1)]])


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
    return float(sum(pmf[k] * h(fanout[k], k, spec.temperature, backup, spec.sampler_c, spec.k)
                     for k in range(spec.k + 1) if pmf[k] > 0))


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
class RoundTimes:
    """Phase times (s) of one round at a given batch and context."""

    verify: float
    ar_step: float
    draft_step: float
    build: float  # SSD cache build on one draft device (glue + K tree steps)
    backup: float
    msg_up: float
    msg_down: float


def round_times(profile: Profile, spec: SpecConfig, batch: int, context: float, fast: bool) -> RoundTimes:
    """Evaluate the time model for one round (see module docstring)."""
    k = spec.k
    draft_step = profile.draft(batch, 1, context)
    verify = profile.target(batch, k + 1, context) if spec.mode != "ar" else profile.target(batch, 1, context)
    build = backup = up = down = 0.0
    if spec.mode == "ssd":
        width = math.ceil(spec.budget / spec.draft_devices)
        build = profile.draft(batch, k + 1, context) + k * profile.draft(batch, width, context)
        backup = profile.fast_backup_s if fast else k * draft_step
        nb_up, nb_down = message_bytes(spec, profile.vocab_size, batch)
        up, down = profile.message_s(nb_up), profile.message_s(nb_down)
    return RoundTimes(verify, profile.target(batch, 1, context), draft_step, build, backup, up, down)


def ssd_round_time(rt: RoundTimes, p_hit: float, batch: int) -> float:
    """E[SSD round time] with per-sequence hits independent, P(hit) = p_hit each (Corollary 16, general).

    The speculator answers once both its cache is built and the outcome has arrived: max(V, T_p), with
    V = msg_down + verify + msg_up; if any sequence of the batch missed, the backup follows: + T_b.
    With T_p <= V this is exactly Corollary 16's denominator p^b max(1, T_p) + (1 - p^b)(1 + T_b).
    """
    v = rt.msg_down + rt.verify + rt.msg_up
    return max(v, rt.build) + (1.0 - p_hit ** batch) * rt.backup


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
    table = hit_table(profile, spec)
    h_p, h_b = float(pmf_p @ table[0]), float(pmf_b @ table[1])
    p = stationary_p_hit(h_p, h_b)
    n = np.arange(spec.k + 1) + 1.0
    return p, p * float(pmf_p @ n) + (1 - p) * float(pmf_b @ n)


def _ssd_rate(profile: Profile, spec: SpecConfig, batch: int, context: float, fast: bool,
              parts: tuple[float, float]) -> tuple[float, float, RoundTimes]:
    p, tokens = parts
    rt = round_times(profile, spec, batch, context, fast)
    t = ssd_round_time(rt, p, batch)
    return tokens / t, t, rt


def critical_batch_size(profile: Profile, spec: SpecConfig, workload: Workload | None = None,
                        max_batch: int = 256) -> int | None:
    """b*: smallest batch size at which the fast backup beats the neural one (Corollary 16 with this
    profile's latencies); None if it never does up to max_batch (Theorem 17: neural below b*, fast above)."""
    context = mean_context(workload or Workload())
    fast_parts, neural_parts = _ssd_parts(profile, spec, True), _ssd_parts(profile, spec, False)
    for b in range(1, max_batch + 1):
        if (_ssd_rate(profile, spec, b, context, True, fast_parts)[0]
                > _ssd_rate(profile, spec, b, context, False, neural_parts)[0]):
            return b
    return None


def uses_fast_backup(profile: Profile, spec: SpecConfig, workload: Workload | None = None) -> bool:
    """Resolve spec.backup: "auto" picks fast iff batch_size >= b*."""
    if spec.backup != "auto":
        return spec.backup == "fast"
    return critical_batch_size(profile, spec, workload, max_batch=spec.batch_size) is not None


def predict(profile: Profile, spec: SpecConfig, workload: Workload) -> Prediction:
    """Closed-form tokens/s for AR, SD or SSD at the workload's mean context (cheap: for pruning)."""
    b, context = spec.batch_size, mean_context(workload)
    t_ar = profile.target(b, 1, context)
    if spec.mode == "ar":
        return Prediction(1.0, t_ar, 1 / t_ar, b / t_ar, 0.0, 0.0, 0.0, t_ar, 1.0, "none")
    if spec.mode == "sd":
        tokens = profile.acceptance.expected_tokens(spec.k, spec.temperature, spec.sampler_c)
        rt = round_times(profile, spec, b, context, False)
        t = spec.k * rt.draft_step + rt.verify
        return Prediction(tokens, t, tokens / t, b * tokens / t, 0.0, 0.0, 0.0, rt.verify, tokens / t * t_ar, "none")
    fast = uses_fast_backup(profile, spec, workload)
    parts = _ssd_parts(profile, spec, fast)
    rate, t, rt = _ssd_rate(profile, spec, b, context, fast, parts)
    return Prediction(parts[1], t, rate, b * rate, parts[0], rt.build, rt.backup, rt.verify, rate * t_ar,
                      "fast" if fast else "neural")
