"""One error type for bad input, so every layer reports the field and the allowed range the same way."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad input: names the field, what is wrong, and what is allowed."""

    def __init__(self, field: str, problem: str, allowed: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.allowed = allowed
        msg = f"{field}: {problem}"
        if allowed:
            msg += f"; allowed: {allowed}"
        super().__init__(msg)


def check_number(field: str, value: object, lo: float | None = None, hi: float | None = None,
                 integer: bool = False, lo_open: bool = False) -> float:
    """Validate a number in [lo, hi] (or (lo, hi] with lo_open) and return it; raise ConfigError otherwise."""
    kind = "an integer" if integer else "a number"
    rng = f"{'(' if lo_open else '['}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field, f"expected {kind}, got {type(value).__name__} {value!r}", rng)
    if integer and not float(value).is_integer():
        raise ConfigError(field, f"expected {kind}, got {value!r}", rng)
    if value != value:  # NaN
        raise ConfigError(field, "is NaN", rng)
    if lo is not None and (value < lo or (lo_open and value == lo)):
        raise ConfigError(field, f"{value!r} is out of range", rng)
    if hi is not None and value > hi:
        raise ConfigError(field, f"{value!r} is out of range", rng)
    return value


def check_choice(field: str, value: object, choices: tuple[str, ...]) -> str:
    """Validate that value is one of the allowed strings."""
    if value not in choices:
        raise ConfigError(field, f"unknown value {value!r}", " | ".join(choices))
    return value  # type: ignore[return-value]
