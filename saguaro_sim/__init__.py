"""Planning half of saguaro: configs, closed forms, discrete-event simulator, optimizer (no torch)."""

from saguaro_sim.config import SpecConfig
from saguaro_sim.workload import Workload

__all__ = ["SpecConfig", "Workload"]

try:  # modules that land later
    from saguaro_sim.simulate import SimResult, simulate  # noqa: F401

    __all__ += ["SimResult", "simulate"]
except ImportError:  # pragma: no cover
    pass
try:
    from saguaro_sim.optimize import Plan, optimize  # noqa: F401

    __all__ += ["Plan", "optimize"]
except ImportError:  # pragma: no cover
    pass
