"""The one resolver: settle what a SpecConfig leaves open, for a profile, so that what is planned is what runs.

``resolve(spec, profile)`` fixes the fan-out per position for the primary and after-miss schedules, the
backup actually used (``auto``: neural below b*, fast from b* on, b* from the closed forms at the default
workload's context), the SSD message protocol and the tree width the draft builds per device (the executor's
cache holds max(sum F, sum F_miss) branches per sequence). The closed forms, the simulator, the optimizer and
``saguaro_exec.run`` all call it.
"""

from __future__ import annotations

from dataclasses import dataclass

from calibration.errors import ConfigError, check_choice, check_number
from calibration.interp import pick_temperature
from calibration.profile import Profile
from saguaro_sim.config import SpecConfig
from saguaro_sim.fanout import geometric_fanout, uniform_fanout

PROTOCOLS = ("auto", "push", "reply")
PUSH_Q_BYTES = 4 << 20     # auto: push the cache unless its q rows (T > 0) exceed this per round
DEFAULT_PROFILE = "cpu-tinypair"   # what the executor resolves with when given no measured profile


@dataclass(frozen=True)
class ResolvedSpec:
    """A SpecConfig's open choices, settled: fanout / fanout_miss F_0..F_K (empty for AR), backup ("neural" |
    "fast" | "none" outside SSD), protocol ("push" | "reply" | "none"), tree_width per draft device
    (branches per sequence; empty outside SSD), the profile it was resolved with, and where SSD's draft runs:
    placement "separate" | "shared", sharing "none" | "time-sliced" | "concurrent", and for "concurrent"
    the slowdown of each while both run (profile.shared_slowdown; 1.0 otherwise)."""

    fanout: tuple[int, ...]
    fanout_miss: tuple[int, ...]
    backup: str
    protocol: str
    tree_width: tuple[int, ...]
    profile: str = ""
    placement: str = "separate"
    sharing: str = "none"
    slowdown: float = 1.0

    @property
    def branches(self) -> int:
        """Branches the cache holds per sequence: the larger schedule's total (at least 1)."""
        return max(sum(self.fanout), sum(self.fanout_miss), 1)

    def to_dict(self) -> dict:
        return {"fanout": list(self.fanout), "fanout_miss": list(self.fanout_miss), "backup": self.backup,
                "protocol": self.protocol, "tree_width": list(self.tree_width), "profile": self.profile,
                "placement": self.placement, "sharing": self.sharing, "slowdown": self.slowdown}


def hit_exponent(profile: Profile, temperature: float) -> float:
    """Power-law exponent r of the primary miss curve at this temperature (for geometric fan-out)."""
    lo, hi, w = pick_temperature(profile.hits.by_temperature, temperature)
    return (1 - w) * lo["primary"]["r"] + w * hi["primary"]["r"]


def resolve_fanouts(profile: Profile, spec: SpecConfig) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Concrete (primary, after-miss) fan-outs: the given ones, else `fanout_shape` for the budget (geometric
    with the profile's mean acceptance and hit exponent); after-miss defaults to the primary schedule."""
    if spec.fanout is not None:
        primary = spec.fanout
    elif spec.fanout_shape == "uniform":
        primary = uniform_fanout(spec.k, spec.budget)
    else:
        alpha = profile.acceptance.mean_alpha(spec.k, spec.temperature, spec.sampler_c)
        primary = geometric_fanout(alpha, hit_exponent(profile, spec.temperature), spec.k, spec.budget)
    miss = spec.fanout_miss if spec.fanout_miss is not None else primary
    if sum(miss) > spec.budget:
        raise ConfigError("fanout_miss", f"sums to {sum(miss)}, more than budget {spec.budget}",
                          f"sum(fanout_miss) <= budget = {spec.budget}")
    return tuple(primary), tuple(miss)


def split_width(branches: int, devices: int) -> tuple[int, ...]:
    """Branches per draft device when `branches` are shared by `devices` (the first ones take the rest)."""
    return tuple(branches // devices + (1 if i < branches % devices else 0) for i in range(devices))


def choose_protocol(choice: str, spec: SpecConfig, branches: int, vocab: int, batch: int) -> str:
    """"auto" -> "push" unless the pushed cache's q rows (T > 0) exceed PUSH_Q_BYTES per round."""
    check_choice("protocol", choice, PROTOCOLS)
    if choice != "auto":
        return choice
    if spec.temperature <= 0:
        return "push"
    return "push" if batch * branches * spec.k * vocab * 4 <= PUSH_Q_BYTES else "reply"


def resolve(spec: SpecConfig, profile: Profile, batch_size: int | None = None,
            protocol: str = "auto") -> ResolvedSpec:
    """Settle spec's open choices on this profile (batch_size defaults to spec.batch_size)."""
    if not isinstance(spec, SpecConfig):
        raise ConfigError("spec", f"expected SpecConfig, got {type(spec).__name__}", "SpecConfig")
    if not isinstance(profile, Profile):
        raise ConfigError("profile", f"expected Profile, got {type(profile).__name__}", "calibration.Profile")
    batch = spec.batch_size if batch_size is None else check_number("batch_size", batch_size, 1, 4096, integer=True)
    check_choice("protocol", protocol, PROTOCOLS)
    if spec.mode == "ar":
        return ResolvedSpec((), (), "none", "none", (), profile.name)
    primary, miss = resolve_fanouts(profile, spec)
    if spec.mode == "sd":
        return ResolvedSpec(primary, miss, "none", "none", (), profile.name)
    backup = spec.backup
    if backup == "auto":
        from saguaro_sim.analytic import critical_batch_size  # the closed forms use this module

        b_star = critical_batch_size(profile, spec.replace(backup="neural"), max_batch=batch)
        backup = "fast" if b_star is not None else "neural"
    branches = max(sum(primary), sum(miss), 1)
    return ResolvedSpec(primary, miss, backup, choose_protocol(protocol, spec, branches, profile.vocab_size, batch),
                        split_width(branches, spec.draft_devices), profile.name, *placement_of(spec, profile))


def placement_of(spec: SpecConfig, profile: Profile) -> tuple[str, str, float]:
    """(placement, sharing, slowdown) of SSD's draft: separate devices, or the target's one device shared
    time-sliced or concurrently (each slowed by profile.shared_slowdown while both run). Separate devices of
    one host that slow each other (profile.beside_slowdown > 1: CPU cores) overlap as "concurrent" sharing at
    that slowdown, with one draft device (the model holds two competing forwards)."""
    if spec.placement == "separate":
        if profile.beside_slowdown > 1.0 and spec.draft_devices == 1:
            return "separate", "concurrent", profile.beside_slowdown
        return "separate", "none", 1.0
    return "shared", spec.sharing, profile.shared_slowdown if spec.sharing == "concurrent" else 1.0


def run_profile(profile: object = None) -> tuple[Profile, str]:
    """The profile a real run resolves with, and a line saying which: a Profile, a preset name or profile
    JSON path, or None = the shipped DEFAULT_PROFILE (stated as such: no measured profile was given)."""
    from calibration.profile import load_preset

    if isinstance(profile, Profile):
        return profile, f"profile {profile.name!r} (given)"
    if profile is None:
        return load_preset(DEFAULT_PROFILE), f"default profile {DEFAULT_PROFILE!r} (no measured profile given)"
    if not isinstance(profile, str):
        raise ConfigError("profile", f"expected a preset name, a profile JSON path or a Profile, got "
                          f"{type(profile).__name__}", "a preset name | a .json path | calibration.Profile")
    return load_preset(profile), f"profile {profile!r} (given)"
