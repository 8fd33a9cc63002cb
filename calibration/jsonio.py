"""Atomic JSON files with a schema version: nothing half-written, clear errors on corrupt or foreign files."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from calibration.errors import ConfigError

MAX_DEPTH = 64          # nesting any saguaro file needs is < 10; deeper input is refused before parsing
MAX_BYTES = 256 << 20   # a config / profile / measurements file larger than this is not one of ours


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write text to path via a temp file in the same folder and an atomic rename; a failure (a folder at
    path, a read-only or missing parent, a full disk) is a ConfigError naming the path, and leaves nothing."""
    path = Path(path)
    tmp = None
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "is a folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise ConfigError(str(path), f"cannot write ({e.strerror or e})", "a writable file path") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def dump_json(path: str | os.PathLike, obj: Any) -> None:
    """Write obj as indented JSON, atomically."""
    write_atomic(path, json.dumps(obj, indent=1, default=_default) + "\n")


def _default(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def read_text(path: str | os.PathLike, kind: str, where: str | None = None) -> str:
    """The UTF-8 text of a file; ConfigError naming ``where`` (default: the path) when it is missing,
    unreadable, too large or not UTF-8."""
    path = Path(path)
    where = where or str(path)
    if not path.is_file():
        raise ConfigError(where, f"{kind} file not found", "an existing file")
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ConfigError(where, f"{kind} file is larger than {MAX_BYTES >> 20} MiB", "a saguaro file")
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(where, f"cannot read {kind} file ({e.strerror})", "a readable file") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(where, f"{kind} file is not UTF-8 text (invalid byte at offset {e.start})",
                          "UTF-8 text") from None


_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"' + r"|'[^'\n]*'")
_BRACKET = re.compile(r"[\[\]{}]")


def _too_deep(text: str) -> bool:
    """Bracket nesting deeper than MAX_DEPTH outside strings, checked without recursion."""
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_DEPTH:
            return True
    return False


def parse_json(text: str, kind: str, where: str) -> Any:
    """json.loads with limits (depth, digits of integers); every failure is a ConfigError naming ``where``."""
    return _parse(text, json.loads, f"corrupt {kind} JSON", "a valid JSON document", where)


def parse_toml(text: str, kind: str, where: str) -> dict:
    """tomllib.loads with the same limits as parse_json."""
    return _parse(text, tomllib.loads, "syntax error", "valid TOML", where)


def _parse(text: str, loads: Any, problem: str, allowed: str, where: str) -> Any:
    if _too_deep(text):
        raise ConfigError(where, f"{problem} (nested deeper than {MAX_DEPTH} levels)", allowed)
    try:
        return loads(text)
    except (ValueError, RecursionError) as e:   # decode errors, integers over the digit limit, deep nesting
        raise ConfigError(where, f"{problem} ({_why(e)})", allowed) from None


def _why(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "nested too deeply"
    if "digits" in str(e) and "integer" in str(e):
        return f"an integer has more than {sys.get_int_max_str_digits()} digits"
    return str(e)


def load_toml(path: str | os.PathLike, kind: str = "config") -> dict:
    """Read a TOML file through read_text and parse_toml (errors name the path)."""
    return parse_toml(read_text(path, kind), kind, str(path))


def load_json_any(path: str | os.PathLike, kind: str, where: str | None = None) -> Any:
    """Read any JSON document through read_text and parse_json (errors name ``where`` or the path)."""
    where = where or str(path)
    return parse_json(read_text(path, kind, where), kind, where)


def load_json(path: str | os.PathLike, kind: str, schema: int | None = None) -> dict:
    """Read a JSON object of the given kind; check its schema version when one is expected."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), f"{kind} file not found", "an existing JSON file")
    data = load_json_any(path, kind)
    if not isinstance(data, dict):
        raise ConfigError(str(path), f"{kind} JSON must be an object, got {type(data).__name__}", "a JSON object")
    if schema is not None:
        check_schema(data, kind, schema, str(path))
    return data


def check_schema(data: dict, kind: str, schema: int, where: str = "schema_version") -> None:
    """Reject missing, foreign or future schema versions with a clear message."""
    v = data.get("schema_version")
    if v is None:
        raise ConfigError(f"{where}: schema_version", f"missing in {kind}", f"{schema}")
    if v != schema:
        raise ConfigError(f"{where}: schema_version", f"{kind} has schema version {v!r}", f"{schema}")
