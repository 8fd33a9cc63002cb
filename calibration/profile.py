"""Profile: everything the simulator needs about one (hardware, target, draft) triple; versioned JSON."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from calibration.acceptance import AcceptanceModel
from calibration.errors import ConfigError, check_number
from calibration.hits import HitCurve
from calibration.jsonio import dump_json, load_json
from calibration.latency import LatencyModel
from calibration.overheads import ExecutorCosts

SCHEMA_VERSION = 1
PRESET_DIR = Path(__file__).parent / "profiles"
SHARED_SLOWDOWN = 1.5   # stated default of Profile.shared_slowdown (no GPU measurement of concurrent kernels yet)


@dataclass(frozen=True)
class Profile:
    """Target/draft latency models, draft-target link, acceptance model, hit curve and provenance.

    link_s: one-way message latency between target and draft (s); link_bytes_per_s: its bandwidth
    (0, the default: infinite, message size costs nothing); a message of n bytes takes link_s + n /
    link_bytes_per_s (``message_s``). ``placement`` (read from provenance["placement"], {} when unknown):
    where the measured run ran (target_devices, draft_device, tp_size). fast_backup_s: latency of the fast (n-gram/random) backup speculator;
    fast_backup_acceptance: per-position acceptance of its speculations (None: it yields no accepted token).
    shared_slowdown: how many times slower each of draft and target runs while both run at once on one
    device (SSD placement "shared", sharing "concurrent": MPS or streams); 1 = perfect overlap, 2 = no gain
    over time-slicing. The default SHARED_SLOWDOWN is stated, not measured (bench/gpu_check.sh measures it).
    beside_slowdown: the same for SSD placement "separate" when the draft's device shares a host with the
    target's (CPU cores: vector units, caches, a frequency budget): how many times slower verification and cache
    build each run while both compute (saguaro_exec/measure/beside.py; 1 = no interference, separate GPUs).
    """

    name: str
    target: LatencyModel
    draft: LatencyModel
    link_s: float = 0.0
    acceptance: AcceptanceModel = field(default_factory=lambda: AcceptanceModel.geometric(0.8))
    hits: HitCurve = field(default_factory=lambda: HitCurve.power_law(0.3, 0.5))
    link_bytes_per_s: float = 0.0
    fast_backup_s: float = 0.0
    verifier_gap_s: float = 0.0     # SSD push: the verifier receiving the pushed cache and looking the outcome up
    vocab_size: int = 128256
    provenance: dict = field(default_factory=dict)
    fast_backup_acceptance: AcceptanceModel | None = None
    executor: ExecutorCosts | None = None   # executor overheads per kind of forward (None: microbenchmarks only)
    shared_slowdown: float = SHARED_SLOWDOWN
    beside_slowdown: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError("profile.name", "must be a non-empty string", "text")
        for f, cls in (("target", LatencyModel), ("draft", LatencyModel), ("acceptance", AcceptanceModel),
                       ("hits", HitCurve)):
            if not isinstance(getattr(self, f), cls):
                raise ConfigError(f"profile.{f}", f"expected {cls.__name__}, got {type(getattr(self, f)).__name__}",
                                  cls.__name__)
        fba = self.fast_backup_acceptance
        if fba is not None and not isinstance(fba, AcceptanceModel):
            raise ConfigError("profile.fast_backup_acceptance", f"expected AcceptanceModel, got {type(fba).__name__}",
                              "AcceptanceModel or None")
        if self.executor is not None and not isinstance(self.executor, ExecutorCosts):
            raise ConfigError("profile.executor", f"expected ExecutorCosts, got {type(self.executor).__name__}",
                              "ExecutorCosts or None")
        check_number("profile.link_s", self.link_s, 0.0, 10.0)
        check_number("profile.link_bytes_per_s", self.link_bytes_per_s, 0.0)
        check_number("profile.fast_backup_s", self.fast_backup_s, 0.0, 10.0)
        check_number("profile.verifier_gap_s", self.verifier_gap_s, 0.0, 10.0)
        check_number("profile.vocab_size", self.vocab_size, 1, 10_000_000, integer=True)
        check_number("profile.shared_slowdown", self.shared_slowdown, 1.0, 10.0)
        check_number("profile.beside_slowdown", self.beside_slowdown, 1.0, 10.0)
        for who in ("target", "draft"):
            _check_latency(f"profile.{who}", getattr(self, who))
        _check_placement(self.provenance.get("placement", {}) if isinstance(self.provenance, dict) else {})

    @property
    def placement(self) -> dict:
        """target_devices / draft_device / tp_size of the run this profile was measured on ({}: unknown)."""
        return dict(self.provenance.get("placement", {}))

    def with_(self, **changes: object) -> Profile:
        """A copy with some fields replaced (validated again)."""
        return replace(self, **changes)

    def message_s(self, nbytes: float) -> float:
        """One-way time for a message of nbytes over the draft-target link."""
        return self.link_s + (nbytes / self.link_bytes_per_s if self.link_bytes_per_s > 0 else 0.0)

    def to_dict(self) -> dict:
        d = {"schema_version": SCHEMA_VERSION, "name": self.name, "target": self.target.to_dict(),
             "draft": self.draft.to_dict(), "link_s": self.link_s, "link_bytes_per_s": self.link_bytes_per_s,
             "fast_backup_s": self.fast_backup_s, "verifier_gap_s": self.verifier_gap_s, "vocab_size": self.vocab_size,
             "acceptance": self.acceptance.to_dict(), "hits": self.hits.to_dict(), "provenance": self.provenance}
        if self.fast_backup_acceptance is not None:  # absent in older profiles: written only when known
            d["fast_backup_acceptance"] = self.fast_backup_acceptance.to_dict()
        if self.executor is not None:
            d["executor"] = self.executor.to_dict()
        if self.shared_slowdown != SHARED_SLOWDOWN:   # written only when set (older profiles have none)
            d["shared_slowdown"] = self.shared_slowdown
        if self.beside_slowdown != 1.0:
            d["beside_slowdown"] = self.beside_slowdown
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Profile:
        """Build from a dict produced by to_dict (schema-checked by from_json)."""
        required = ("name", "target", "draft", "acceptance", "hits")
        for key in required:
            if key not in d:
                raise ConfigError(f"profile.{key}", "missing", ", ".join(required))
        known = {"schema_version", "name", "target", "draft", "link_s", "link_bytes_per_s", "fast_backup_s",
                 "verifier_gap_s",
                 "vocab_size", "acceptance", "hits", "provenance", "fast_backup_acceptance", "executor",
                 "shared_slowdown", "beside_slowdown"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"profile.{unknown[0]}", "unknown key", ", ".join(sorted(known)))
        if not isinstance(d.get("provenance", {}), dict):
            raise ConfigError("profile.provenance", f"must be an object, got {type(d['provenance']).__name__}",
                              "{key: value}")
        return cls(name=d["name"], target=LatencyModel.from_dict(d["target"], "profile.target"),
                   draft=LatencyModel.from_dict(d["draft"], "profile.draft"), link_s=d.get("link_s", 0.0),
                   acceptance=AcceptanceModel.from_dict(d["acceptance"]), hits=HitCurve.from_dict(d["hits"]),
                   link_bytes_per_s=d.get("link_bytes_per_s", 0.0), fast_backup_s=d.get("fast_backup_s", 0.0),
                   verifier_gap_s=d.get("verifier_gap_s", 0.0),
                   vocab_size=d.get("vocab_size", 128256), provenance=dict(d.get("provenance", {})),
                   fast_backup_acceptance=_optional_acceptance(d.get("fast_backup_acceptance")),
                   executor=ExecutorCosts.from_dict(d.get("executor")),
                   shared_slowdown=d.get("shared_slowdown", SHARED_SLOWDOWN),
                   beside_slowdown=d.get("beside_slowdown", 1.0))

    def to_json(self, path: str | os.PathLike) -> None:
        """Write atomically (temp file + rename)."""
        dump_json(path, self.to_dict())

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> Profile:
        """Read and validate a profile file; errors name the file and field."""
        data = load_json(path, "profile", SCHEMA_VERSION)
        try:
            return cls.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e.field}", e.problem, e.allowed) from None
        except (TypeError, AttributeError) as e:
            raise ConfigError(str(path), f"malformed profile ({e})", "a profile written by saguaro") from None


def placement_of(metas: list[dict]) -> dict:
    """Placement recorded by executor runs (the first meta with a device): target_devices, draft_device,
    tp_size; {} when none records one."""
    for m in metas:
        devices = m.get("target_devices") or ([m["device"]] if isinstance(m.get("device"), str) else None)
        if devices:
            return {"target_devices": list(devices), "draft_device": m.get("draft_device"), "tp_size": len(devices)}
    return {}


# shapes a plan can ask a latency model for: (batch, new tokens per sequence, context)
_LATENCY_SHAPES = ((1, 1, 0), (1, 1, 4096), (1, 65, 4096), (64, 65, 32768), (4096, 65, 131072))
LATENCY_RANGE_S = (1e-9, 1e5)


def _check_latency(where: str, model: LatencyModel) -> None:
    """Every latency the model predicts at the shapes a plan uses is finite and within LATENCY_RANGE_S:
    a zero, infinite or 1e308 latency would divide by zero or overflow in simulate / optimize."""
    lo, hi = LATENCY_RANGE_S
    for batch, new, ctx in _LATENCY_SHAPES[:2]:
        t = model(batch, new, ctx)
        if not lo <= t <= hi:  # NaN fails too
            raise ConfigError(where, f"predicts {t!r} s for one forward (batch {batch}, {new} new token(s), "
                              f"context {ctx})", f"latencies in [{lo:g}, {hi:g}] s")
    for batch, new, ctx in _LATENCY_SHAPES[2:]:
        t = model(batch, new, ctx)
        if not t <= hi * 1e3:
            raise ConfigError(where, f"predicts {t!r} s for one forward (batch {batch}, {new} new tokens, "
                              f"context {ctx})", f"latencies up to {hi * 1e3:g} s")


def _check_placement(p: object) -> None:
    """provenance.placement: an object with optional target_devices (list of device names), draft_device
    (name or null) and tp_size (a positive integer, = len(target_devices) when both are given)."""
    where, allowed = "profile.provenance.placement", "{target_devices: [str], draft_device: str, tp_size: int}"
    if not isinstance(p, dict):
        raise ConfigError(where, f"must be an object, got {type(p).__name__}", allowed)
    unknown = sorted(set(p) - {"target_devices", "draft_device", "tp_size"})
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", "unknown key", allowed)
    devices = p.get("target_devices")
    if devices is not None and (not isinstance(devices, list) or not devices
                                or not all(isinstance(d, str) and d for d in devices)):
        raise ConfigError(f"{where}.target_devices", f"got {devices!r}", "a non-empty list of device names")
    if p.get("draft_device") is not None and not isinstance(p["draft_device"], str):
        raise ConfigError(f"{where}.draft_device", f"got {p['draft_device']!r}", "a device name or null")
    if "tp_size" in p:
        check_number(f"{where}.tp_size", p["tp_size"], 1, 1_000_000, integer=True)
        if devices is not None and p["tp_size"] != len(devices):
            raise ConfigError(f"{where}.tp_size", f"{p['tp_size']} but {len(devices)} target_devices",
                              "len(target_devices)")


def _optional_acceptance(d: object) -> AcceptanceModel | None:
    if d is None:
        return None
    try:
        return AcceptanceModel.from_dict(d)
    except ConfigError as e:
        raise ConfigError(f"profile.fast_backup_{e.field}", e.problem, e.allowed) from None


def list_presets() -> list[str]:
    """Names of the shipped profile presets (files in calibration/profiles/)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def load_preset(name: str) -> Profile:
    """Load a shipped preset by name, or a profile JSON by path."""
    if os.path.sep in name or name.endswith(".json"):
        return Profile.from_json(name)
    path = PRESET_DIR / f"{name}.json"
    if not path.is_file():
        raise ConfigError("profile", f"unknown preset {name!r}", ", ".join(list_presets()) or "(none shipped)")
    return Profile.from_json(path)
