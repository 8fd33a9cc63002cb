"""The optimizer's search space: Constraints and the candidate AR / SD / SSD configurations they allow."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np

from calibration.acceptance import AcceptanceModel
from calibration.errors import ConfigError, check_choice, check_number
from calibration.hits import HitCurve
from calibration.profile import Profile
from saguaro_sim.analytic import fast_backup_pmf
from saguaro_sim.config import BACKUPS, MODES, SpecConfig, check_placement
from saguaro_sim.fanout import exact_fanouts

SHAPES = ("uniform", "geometric", "exact")
ABSOLUTE_BUDGETS = (8, 16, 32, 64, 128, 256)
# steps of one (k+1) up to 6 and of half the budget beyond: on the deep CPU pair at K = 7 the build leaves a
# fifth of the verification idle at budget 32 while 64 overruns it, and 40-48 were never tried (session 20)
BUDGET_MULTIPLES = (1, 2, 3, 4, 5, 6, 8, 12, 16)


@dataclass(frozen=True)
class Constraints:
    """Limits on the search: K range, budget per sequence, draft devices, allowed modes/backups, the
    batch sizes the Pareto frontier spans, how many predicted-best candidates the simulator confirms,
    where SSD's draft runs (placement "separate" | "shared" with sharing, as in SpecConfig: shared uses no
    device of its own, so at most one draft device), and the build margin: SSD candidates are ranked as
    simulated with cache builds (1 + build_margin) times their profiled cost, so that a draft slower than
    profiled does not make the verifier wait (a build that fills the verification on the profile stalls when
    the draft's core slows; one that leaves room loses only a few hits)."""

    k_range: tuple[int, int] = (1, 10)
    max_budget: int = 256
    max_draft_devices: int = 1
    target_devices: int | None = None
    modes: tuple[str, ...] = MODES
    backups: tuple[str, ...] = ("neural", "fast")
    batch_sizes: tuple[int, ...] | None = None
    top_n: int = 8
    placement: str = "separate"
    sharing: str | None = None
    build_margin: float = 0.0

    def __post_init__(self) -> None:
        kr = self.k_range
        if not isinstance(kr, list | tuple) or len(kr) != 2:
            raise ConfigError("constraints.k_range", f"expected (k_min, k_max), got {kr!r}", "1 <= k_min <= k_max <= 64")
        lo = check_number("constraints.k_range[0]", kr[0], 1, 64, integer=True)
        hi = check_number("constraints.k_range[1]", kr[1], 1, 64, integer=True)
        if lo > hi:
            raise ConfigError("constraints.k_range", f"k_min {lo} > k_max {hi}", "1 <= k_min <= k_max <= 64")
        object.__setattr__(self, "k_range", (int(lo), int(hi)))
        check_number("constraints.max_budget", self.max_budget, 1, 65536, integer=True)
        check_number("constraints.max_draft_devices", self.max_draft_devices, 1, 64, integer=True)
        if self.target_devices is not None:
            check_number("constraints.target_devices", self.target_devices, 1, 4096, integer=True)
        object.__setattr__(self, "modes", _subset("constraints.modes", self.modes, MODES))
        object.__setattr__(self, "backups", _subset("constraints.backups", self.backups, BACKUPS))
        if self.batch_sizes is not None:
            if not isinstance(self.batch_sizes, list | tuple) or not self.batch_sizes:
                raise ConfigError("constraints.batch_sizes", f"expected a non-empty list, got {self.batch_sizes!r}",
                                  "list of integers in [1, 4096]")
            sizes = [int(check_number(f"constraints.batch_sizes[{i}]", b, 1, 4096, integer=True))
                     for i, b in enumerate(self.batch_sizes)]
            object.__setattr__(self, "batch_sizes", tuple(sorted(set(sizes))))
        check_number("constraints.top_n", self.top_n, 1, 1000, integer=True)
        object.__setattr__(self, "build_margin", float(check_number("constraints.build_margin", self.build_margin, 0.0, 1.0)))
        object.__setattr__(self, "sharing", check_placement(self.placement, self.sharing, self.max_draft_devices,
                                                            "constraints.", "max_draft_devices"))

    def to_dict(self) -> dict:
        """JSON-able form (tuples become lists)."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> Constraints:
        """Build from a plain dict (config file / CLI); unknown keys are an error naming the key."""
        if not isinstance(d, dict):
            raise ConfigError("constraints", "must be a table/object", "key = value pairs")
        known = {f.name for f in fields(cls)}
        for key in d:
            if key not in known:
                raise ConfigError(f"constraints.{key}", "unknown key", ", ".join(sorted(known)))
        d = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**d)


@dataclass(frozen=True)
class Candidate:
    """One point of the search: a concrete SpecConfig and the fan-out shape that produced it."""

    spec: SpecConfig
    shape: str  # "uniform" | "geometric" | "exact" for SSD, "-" for AR / SD


def _subset(field: str, values: object, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, list | tuple) or not values:
        raise ConfigError(field, f"expected a non-empty list, got {values!r}", " | ".join(allowed))
    for v in values:
        check_choice(field, v, allowed)
    return tuple(dict.fromkeys(values))


def budgets_for(k: int, max_budget: int) -> list[int]:
    """SSD budgets per sequence tried at lookahead k: multiples of k+1 and a few absolutes, <= max_budget."""
    found = {m * (k + 1) for m in BUDGET_MULTIPLES} | set(ABSOLUTE_BUDGETS)
    out = sorted(b for b in found if b <= max_budget)
    return out or [max_budget]


def sampler_cs(profile: Profile, temperature: float = 1.0) -> list[float]:
    """C = 1 plus every C value the profile characterizes (acceptance or hit-curve c_effect). Saguaro
    sampling reshapes a *sampling* distribution, so at temperature 0 (greedy decoding) only C = 1 applies."""
    if temperature <= 0:
        return [1.0]
    cs = {1.0} | set(profile.acceptance.c_effect) | set(profile.hits.c_effect)
    return sorted(cs, reverse=True)


def exact_schedules(profile: Profile, k: int, budgets: list[int], temperature: float, sampler_c: float,
                    backup: str, memo: dict | None = None) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Exact integer fan-outs {budget: (primary, after-miss)} (fanout.exact_fanouts on the profile's curves).

    After a fast-backup speculation the accepted length follows profile.fast_backup_acceptance (with none
    measured nothing is accepted, k = 0, so the whole budget goes to F_0); after a neural backup the usual
    length distribution meets the backup hit curve. Position k reads the all-accepted hit entry. memo
    caches hit-curve lookups and schedules across calls.
    """
    memo = {} if memo is None else memo
    pmf = profile.acceptance.length_pmf(k, temperature, sampler_c)

    def curve(source: bool, fast: bool) -> Callable[[int, int], float]:
        def miss(f: int, pos: int) -> float:
            key = (f, pos, source, sampler_c, temperature, k, fast)
            if key not in memo:
                memo[key] = profile.hits.miss(f, pos, temperature, source, sampler_c, k, fast)
            return memo[key]
        return miss

    def solve(source: bool, fast: bool = False) -> dict[int, tuple[int, ...]]:
        key = ("schedule", k, tuple(budgets), sampler_c, temperature, source, fast)
        if key not in memo:
            lengths = fast_backup_pmf(profile, k, temperature) if fast else pmf
            memo[key] = exact_fanouts(lengths, curve(source, fast), budgets)
        return memo[key]

    primary = solve(False)
    if backup == "fast":
        after_miss = ({b: (b,) + (0,) * k for b in budgets} if profile.fast_backup_acceptance is None
                      else solve(True, fast=True))
    elif _same_backup_curve(profile.hits):
        after_miss = primary
    else:
        after_miss = solve(True)
    return {b: (_nonzero(primary[b]), _nonzero(after_miss[b])) for b in budgets}


def _same_backup_curve(hits: HitCurve) -> bool:
    return all(by_src["backup"] == by_src["primary"] for by_src in hits.by_temperature.values())


def _nonzero(f: tuple[int, ...]) -> tuple[int, ...]:
    # a zero allocation (every hit already certain) still needs one cached candidate to be a valid schedule
    return f if sum(f) > 0 else (1,) + f[1:]


def candidates(profile: Profile, batch_size: int, temperature: float, constraints: Constraints,
               memo: dict | None = None) -> list[Candidate]:
    """Every configuration in the search space: one AR, SD for each K, SSD over K x budget x shape x C x
    backup x draft devices. AR and SD are always listed (they are the baselines); callers filter by mode.
    SD keeps C = 1: without a cache, Saguaro sampling would only lower acceptance.
    Pass the same memo (one profile) for several batch sizes to reuse the batch-independent fan-outs."""
    common = {"temperature": temperature, "batch_size": batch_size, "placement": constraints.placement,
              "sharing": constraints.sharing}
    out = [Candidate(SpecConfig(mode="ar", k=0, **common), "-")]
    k_lo, k_hi = constraints.k_range
    for k in range(k_lo, k_hi + 1):
        out.append(Candidate(SpecConfig(mode="sd", k=k, **common), "-"))
    if "ssd" not in constraints.modes:
        return out
    memo = {} if memo is None else memo
    for k in range(k_lo, k_hi + 1):
        budgets = budgets_for(k, constraints.max_budget)
        for c in sampler_cs(profile, temperature):
            by_kind = {fast: exact_schedules(profile, k, budgets, temperature, c, "fast" if fast else "neural", memo)
                       for fast in {b == "fast" for b in constraints.backups}}
            for budget in budgets:
                for backup in constraints.backups:
                    primary, after_miss = by_kind[backup == "fast"][budget]
                    for devices in range(1, min(constraints.max_draft_devices, budget) + 1):
                        kw = dict(mode="ssd", k=k, budget=budget, sampler_c=c, backup=backup, draft_devices=devices,
                                  **common)
                        out.append(Candidate(SpecConfig(fanout_shape="uniform", **kw), "uniform"))
                        out.append(Candidate(SpecConfig(fanout_shape="geometric", **kw), "geometric"))
                        out.append(Candidate(SpecConfig(fanout=primary, fanout_miss=after_miss, **kw), "exact"))
    return out


class _MemoHits(HitCurve):
    """The same hit curve, with miss() memoized: the grid asks for the same (F, position, ...) many times."""

    def miss(self, fanout: float, position: int = 0, temperature: float = 0.0, backup: bool = False,
             sampler_c: float = 1.0, k: int | None = None, fast: bool = False) -> float:
        final = k is not None and position >= k  # the only use of k: all-accepted entry or not
        key = (fanout, position, temperature, backup, sampler_c, final, fast)
        memo = self.__dict__.setdefault("_memo", {})
        if key not in memo:
            memo[key] = super().miss(fanout, position, temperature, backup, sampler_c, k, fast)
        return memo[key]


class _MemoAcceptance(AcceptanceModel):
    """The same acceptance model, with rates() memoized (copies returned, so callers cannot corrupt it)."""

    def rates(self, k: int, temperature: float = 0.0, sampler_c: float = 1.0, scale: float = 1.0) -> np.ndarray:
        key = (k, temperature, sampler_c, scale)
        memo = self.__dict__.setdefault("_memo", {})
        if key not in memo:
            memo[key] = super().rates(k, temperature, sampler_c, scale)
        return memo[key].copy()


def memoized(profile: Profile) -> Profile:
    """An equivalent profile whose hit curve and acceptance model cache their lookups (same numbers,
    much faster when a search scores thousands of configurations)."""
    return profile.with_(hits=_same_fields(_MemoHits, profile.hits),
                         acceptance=_same_fields(_MemoAcceptance, profile.acceptance))


def _same_fields(memo_cls: type, model: object) -> object:
    """The memoizing subclass built from every field of `model` (by_k, row_scale, ... included: naming the
    fields by hand once dropped the fitted per-K tables from every search)."""
    return memo_cls(**{f.name: getattr(model, f.name) for f in fields(model)})
