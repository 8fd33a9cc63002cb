"""One error type for bad input, and the typed checks every source (flags, TOML, JSON, API, profile,
checkpoint config.json) goes through, so each layer reports the field and the allowed range the same way.

Rule for integer fields: only true integers pass; an integral float (``k = 4.0`` in TOML, ``threads=2.0``)
is refused with the field named, as is a bool. Non-finite numbers are refused everywhere.
"""

from __future__ import annotations

import math


def show(value: object, limit: int = 60) -> str:
    """repr of a value, safe and short for any input (ints of any size, long or unencodable strings)."""
    if isinstance(value, int) and not isinstance(value, bool):
        digits = value.bit_length() * 0.30103
        if digits > limit:
            return f"an integer of about {int(digits) + 1} digits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - repr of arbitrary objects may raise anything
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ConfigError(ValueError):
    """Bad input: names the field, what is wrong, and what is allowed."""

    def __init__(self, field: str, problem: str, allowed: str | None = None) -> None:
        problem = " ".join(str(problem).split())           # one line, and short whatever value it quotes
        if len(problem) > 240:
            problem = problem[:237] + "..."
        self.field = field
        self.problem = problem
        self.allowed = allowed
        msg = f"{field}: {problem}"
        if allowed:
            msg += f"; allowed: {allowed}"
        super().__init__(msg)

    def renamed(self, field: str) -> ConfigError:
        """The same error reported under another name (the flag or file the user wrote)."""
        return ConfigError(field, self.problem, self.allowed)


def _bound(v: float | None, inf: str) -> str:
    if v is None:
        return inf
    return show(int(v)) if isinstance(v, float) and v.is_integer() and abs(v) < 1e15 else show(v)


def check_number(field: str, value: object, lo: float | None = None, hi: float | None = None,
                 integer: bool = False, lo_open: bool = False) -> float:
    """Validate a finite number in [lo, hi] (or (lo, hi] with lo_open) and return it; ConfigError otherwise.
    integer=True accepts only ints (not 4.0, not True)."""
    kind = "an integer" if integer else "a number"
    if lo is not None and hi is not None:
        rng = f"{kind} in {'(' if lo_open else '['}{_bound(lo, '-inf')}, {_bound(hi, 'inf')}]"
    elif lo is not None:
        rng = f"{'a finite number' if not integer else kind} {'>' if lo_open else '>='} {_bound(lo, '')}"
    elif hi is not None:
        rng = f"{'a finite number' if not integer else kind} <= {_bound(hi, '')}"
    else:
        rng = "a finite number" if not integer else kind
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field, f"expected {kind}, got {type(value).__name__} {show(value)}", rng)
    if integer and not isinstance(value, int):
        raise ConfigError(field, f"expected {kind}, got {show(value)}", rng)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(field, f"{show(value)} is not a finite number", rng)
    if (lo is not None and (value < lo or (lo_open and value == lo))) or (hi is not None and value > hi):
        raise ConfigError(field, f"{show(value)} is out of range", rng)
    return value


def check_int(field: str, value: object, lo: int | None = None, hi: int | None = None) -> int:
    """check_number for an integer field, typed as int."""
    return int(check_number(field, value, lo, hi, integer=True))


def check_bool(field: str, value: object) -> bool:
    """A real boolean (JSON true/false); the string "false" is refused, not read as true."""
    if not isinstance(value, bool):
        raise ConfigError(field, f"expected true or false, got {type(value).__name__} {show(value)}", "true | false")
    return value


def check_text(field: str, value: object, empty: bool = True) -> str:
    """A string that is valid Unicode (no lone surrogates, which cannot be encoded as UTF-8)."""
    if not isinstance(value, str):
        raise ConfigError(field, f"expected text, got {type(value).__name__} {show(value)}", "a string")
    if not empty and not value:
        raise ConfigError(field, "is empty", "a non-empty string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(field, f"not valid Unicode text (lone surrogate at character {e.start})",
                          "text encodable as UTF-8") from None
    return value


def check_choice(field: str, value: object, choices: tuple[str, ...]) -> str:
    """Validate that value is one of the allowed strings."""
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(field, f"unknown value {show(value)}", " | ".join(choices))
    return value
