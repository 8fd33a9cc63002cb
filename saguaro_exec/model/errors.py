"""Error type for bad model configs and checkpoints: `calibration.errors.ConfigError(field, problem, allowed)`.

Re-exported here so the model layer has one import; a same-signature fallback keeps this module
usable if the calibration package is absent.
"""

from __future__ import annotations

try:
    from calibration.errors import ConfigError
except ImportError:  # pragma: no cover

    class ConfigError(ValueError):  # type: ignore[no-redef]
        def __init__(self, field: str, problem: str, allowed: str | None = None) -> None:
            self.field, self.problem, self.allowed = field, problem, allowed
            super().__init__(f"{field}: {problem}" + (f"; allowed: {allowed}" if allowed else ""))


__all__ = ["ConfigError"]
