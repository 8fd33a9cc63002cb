"""SpecConfig: one decoding configuration (AR, SD or SSD) in the paper's vocabulary; validated, TOML/JSON."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from calibration.errors import ConfigError, check_choice, check_number
from calibration.jsonio import load_json_any, load_toml, write_atomic
from saguaro_sim.fanout import check_fanout

MODES = ("ar", "sd", "ssd")
BACKUPS = ("neural", "fast", "auto")
SHAPES = ("geometric", "uniform")
PLACEMENTS = ("separate", "shared")            # SSD's draft on its own device(s), or on the target's one device
SHARINGS = ("time-sliced", "concurrent")       # shared: draft and target kernels serialize, or run side by side


def check_placement(placement: str, sharing: str | None, draft_devices: int, prefix: str = "",
                    devices_field: str = "draft_devices") -> str | None:
    """Validate a placement with its sharing and draft-device count (one rule for SpecConfig and the search's
    Constraints); returns the sharing to store: None when separate, "time-sliced" by default when shared."""
    check_choice(prefix + "placement", placement, PLACEMENTS)
    if placement == "separate":
        if sharing is not None:
            raise ConfigError(prefix + "sharing", f"{sharing!r} given with placement = \"separate\"",
                              "sharing only with placement = \"shared\"")
        return None
    sharing = "time-sliced" if sharing is None else sharing
    check_choice(prefix + "sharing", sharing, SHARINGS)
    if draft_devices != 1:
        raise ConfigError(prefix + devices_field, f"{draft_devices} with placement = \"shared\" (the draft "
                          "shares the target's device)", "1 with placement = \"shared\"")
    return sharing


@dataclass(frozen=True)
class SpecConfig:
    """mode, lookahead k, fan-out F_0..F_K (None = `fanout_shape` for the budget), fanout_miss (schedule
    after a backup speculation), budget (sum of F_k per sequence, split across draft devices), sampler_c
    (Saguaro C), backup policy, temperature, batch size, number of draft devices, and placement: "separate"
    (SSD's draft on devices of its own) or "shared" (on the target's device, one draft device; `sharing` says
    how they compete: "time-sliced", the default, or "concurrent" at profile.shared_slowdown). What is left
    open is settled by saguaro_sim.resolve(spec, profile)."""

    mode: str = "ssd"
    k: int = 4
    fanout: tuple[int, ...] | None = None
    fanout_miss: tuple[int, ...] | None = None
    budget: int | None = None
    sampler_c: float = 1.0
    backup: str = "neural"
    temperature: float = 0.0
    batch_size: int = 1
    draft_devices: int = 1
    fanout_shape: str = "geometric"
    placement: str = "separate"
    sharing: str | None = None   # placement "shared" only; None there means "time-sliced"

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, MODES)
        check_number("k", self.k, 0 if self.mode == "ar" else 1, 64, integer=True)
        for name in ("fanout", "fanout_miss"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, check_fanout(name, v, self.k))
        if self.budget is None:
            budget = sum(self.fanout) if self.fanout is not None else 4 * (self.k + 1)
            object.__setattr__(self, "budget", budget)
        check_number("budget", self.budget, 0 if self.mode != "ssd" else 1, 65536, integer=True)
        if self.fanout is not None and sum(self.fanout) > self.budget:
            raise ConfigError("fanout", f"sums to {sum(self.fanout)}, more than budget {self.budget}",
                              f"sum(fanout) <= budget = {self.budget}")
        if self.fanout_miss is not None and sum(self.fanout_miss) > self.budget:
            raise ConfigError("fanout_miss", f"sums to {sum(self.fanout_miss)}, more than budget {self.budget}",
                              f"sum(fanout_miss) <= budget = {self.budget}")
        check_number("sampler_c", self.sampler_c, 0.0, 1.0)
        check_choice("backup", self.backup, BACKUPS)
        check_number("temperature", self.temperature, 0.0, 10.0)
        check_number("batch_size", self.batch_size, 1, 4096, integer=True)
        check_number("draft_devices", self.draft_devices, 1, 64, integer=True)
        check_choice("fanout_shape", self.fanout_shape, SHAPES)
        object.__setattr__(self, "sharing", check_placement(self.placement, self.sharing, self.draft_devices))

    def replace(self, **changes: object) -> SpecConfig:
        """A validated copy with some fields changed."""
        d = asdict(self)
        d.update(changes)
        return SpecConfig(**d)

    # serialization ------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        for name in ("fanout", "fanout_miss"):
            if d[name] is not None:
                d[name] = list(d[name])
        return d

    @classmethod
    def from_dict(cls, d: dict, where: str = "") -> SpecConfig:
        """Build from a plain dict; unknown keys are an error naming the key."""
        if not isinstance(d, dict):
            raise ConfigError(where or "spec", "must be a table/object", "key = value pairs")
        known = {f.name for f in fields(cls)}
        for key in d:
            if key not in known:
                raise ConfigError(f"{where}{key}", "unknown key", ", ".join(sorted(known)))
        d = dict(d)
        for name in ("fanout", "fanout_miss"):
            if isinstance(d.get(name), list):
                d[name] = tuple(d[name])
        try:
            return cls(**d)
        except ConfigError as e:
            raise ConfigError(f"{where}{e.field}", e.problem, e.allowed) from None

    def to_toml(self) -> str:
        """TOML text of the non-None fields (the recommended config format)."""
        lines = []
        for key, v in self.to_dict().items():
            if v is None:
                continue
            lines.append(f"{key} = {json.dumps(v)}")
        return "\n".join(lines) + "\n"

    def save(self, path: str | os.PathLike) -> None:
        """Write .toml or .json atomically, by extension."""
        text = self.to_toml() if str(path).endswith(".toml") else json.dumps(self.to_dict(), indent=1) + "\n"
        write_atomic(path, text)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SpecConfig:
        """Read .toml (optionally with a [spec] table) or .json; errors name the file and the field."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(str(path), "config file not found", "an existing .toml or .json file")
        data = load_json_any(path, "config") if path.suffix == ".json" else load_toml(path)
        if isinstance(data, dict) and isinstance(data.get("spec"), dict):
            data = data["spec"]
        return cls.from_dict(data, where=f"{path}: ")
