"""Running half of saguaro: a real, lossless AR / SD / SSD executor (torch), with measurements."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from saguaro_exec.config import RunConfig
    from saguaro_exec.measure.report import RunReport
    from saguaro_exec.run import run

__all__ = ["RunConfig", "RunReport", "run"]

# Loaded on first use (PEP 562): every child process (``python -m saguaro_exec.child``, the draft process, the
# tensor-parallel workers) runs this file, and ``run`` pulls in the planner (saguaro_sim, simpy) that no child
# uses. Keep this file free of other imports of saguaro code.
_LAZY = {"RunConfig": "saguaro_exec.config", "RunReport": "saguaro_exec.measure.report",
         "run": "saguaro_exec.run"}


def __getattr__(name: str) -> Any:
    """Import a public name's module when the name is first asked for."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """Keeps ``saguaro_exec.run`` the function: loading the submodule of that name binds it on the package."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType) and value.__name__ == _LAZY[name]:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
