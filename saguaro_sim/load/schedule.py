"""The configuration used at each live batch size (a K / fan-out schedule by batch size, as serving engines
take per-batch-size speculative settings), and the closed-form-best schedule for a mode."""

from __future__ import annotations

from dataclasses import dataclass

from calibration.errors import ConfigError, check_choice, check_number
from calibration.profile import Profile
from saguaro_sim.analytic import predict
from saguaro_sim.config import MODES, SpecConfig
from saguaro_sim.workload import Workload

BANDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SSD_BUDGET_MULTIPLES = (1, 2, 4, 8)


@dataclass(frozen=True)
class ConfigSchedule:
    """entries: (from_batch, spec) sorted by from_batch, the first from batch 1; spec applies to live batch
    sizes from from_batch up to the next entry's. All entries share one mode and draft_devices."""

    entries: tuple[tuple[int, SpecConfig], ...]

    def __post_init__(self) -> None:
        if not self.entries or self.entries[0][0] != 1:
            raise ConfigError("schedule", "must start at batch 1", "(1, spec), (b2, spec2), ... with 1 < b2 < ...")
        froms = [b for b, _ in self.entries]
        if froms != sorted(set(froms)):
            raise ConfigError("schedule", f"batch sizes {froms} are not increasing", "increasing from_batch values")
        specs = [s for _, s in self.entries]
        if len({s.mode for s in specs}) != 1 or len({s.draft_devices for s in specs}) != 1:
            raise ConfigError("schedule", "mixes modes or draft_devices", "one mode and draft_devices throughout")

    @classmethod
    def fixed(cls, spec: SpecConfig) -> ConfigSchedule:
        """The same configuration at every batch size."""
        return cls(((1, spec),))

    @property
    def mode(self) -> str:
        return self.entries[0][1].mode

    @property
    def draft_devices(self) -> int:
        return self.entries[0][1].draft_devices if self.mode == "ssd" else 0

    @property
    def placement(self) -> str:
        return self.entries[0][1].placement
    def band(self, batch: int) -> int:
        """Index of the entry used at this live batch size."""
        i = 0
        for j, (b, _) in enumerate(self.entries):
            if batch >= b:
                i = j
        return i

    def for_batch(self, batch: int) -> SpecConfig:
        """The configuration used when `batch` rows are live."""
        return self.entries[self.band(batch)][1]

    def to_dict(self) -> list[dict]:
        return [{"from_batch": b, **s.to_dict()} for b, s in self.entries]

    @classmethod
    def from_dict(cls, entries: list[dict]) -> ConfigSchedule:
        """The inverse of to_dict (a plan's `schedules[mode]`)."""
        if not isinstance(entries, list) or not entries:
            raise ConfigError("schedule", "must be a non-empty list", "[{from_batch, SpecConfig keys...}, ...]")
        out = []
        for i, e in enumerate(entries):
            e = dict(e)
            b = check_number(f"schedule[{i}].from_batch", e.pop("from_batch", None), 1, 4096, integer=True)
            out.append((int(b), SpecConfig.from_dict(e, where=f"schedule[{i}].")))
        return cls(tuple(out))


def _candidates(mode: str, batch: int, temperature: float, k_max: int, draft_devices: int,
                placement: str = "separate", sharing: str | None = None) -> list[SpecConfig]:
    if mode == "ar":
        return [SpecConfig(mode="ar", k=0, budget=0, batch_size=batch, temperature=temperature)]
    if mode == "sd":
        return [SpecConfig(mode="sd", k=k, batch_size=batch, temperature=temperature) for k in range(1, k_max + 1)]
    return [SpecConfig(mode="ssd", k=k, budget=m * (k + 1), backup=backup, batch_size=batch, temperature=temperature,
                       draft_devices=draft_devices, placement=placement, sharing=sharing)
            for k in range(1, k_max + 1) for m in SSD_BUDGET_MULTIPLES for backup in ("neural", "fast")]


def best_schedule(profile: Profile, mode: str, max_batch: int, prompt_tokens: float = 512,
                  output_tokens: float = 256, temperature: float = 0.0, k_max: int = 8,
                  draft_devices: int = 1, placement: str = "separate", sharing: str | None = None) -> ConfigSchedule:
    """Per band of batch sizes (1, 2, 4, ... up to max_batch), the configuration with the most tokens/s at that
    batch by the closed forms (at a batch, per-row speed and throughput rank configurations alike)."""
    check_choice("mode", mode, MODES)
    check_number("max_batch", max_batch, 1, 4096, integer=True)
    check_number("k_max", k_max, 1, 64, integer=True)
    from saguaro_sim.search import memoized

    fast_profile = memoized(profile)
    entries, last = [], None
    for b in [x for x in BANDS if x <= max_batch]:
        w = Workload(num_sequences=b, output_tokens=max(1, round(output_tokens)), prompt_tokens=round(prompt_tokens))
        best = max(_candidates(mode, b, temperature, k_max, draft_devices, placement, sharing),
                   key=lambda s: predict(fast_profile, s, w).tokens_per_s_per_seq)
        key = best.replace(batch_size=1)
        if key != last:
            entries.append((b, best))
            last = key
    return ConfigSchedule(tuple(entries))
