"""Atomic JSON files with a schema version: nothing half-written, clear errors on corrupt or foreign files."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from calibration.errors import ConfigError


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write text to path via a temp file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def dump_json(path: str | os.PathLike, obj: Any) -> None:
    """Write obj as indented JSON, atomically."""
    write_atomic(path, json.dumps(obj, indent=1, default=_default) + "\n")


def _default(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def load_json(path: str | os.PathLike, kind: str, schema: int | None = None) -> dict:
    """Read a JSON object of the given kind; check its schema version when one is expected."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), f"{kind} file not found", "an existing JSON file")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(str(path), f"corrupt {kind} JSON ({e})", "a valid JSON document") from None
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
