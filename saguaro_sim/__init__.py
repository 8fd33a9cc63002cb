"""Planning half of saguaro: configs, closed forms, discrete-event simulator, optimizer (no torch)."""

from saguaro_sim.config import SpecConfig
from saguaro_sim.load import plan
from saguaro_sim.optimize import Plan, optimize
from saguaro_sim.resolve import ResolvedSpec, resolve  # the function shadows the module name on purpose
from saguaro_sim.search import Constraints
from saguaro_sim.simulate import SimResult, simulate
from saguaro_sim.workload import Workload

__all__ = ["Constraints", "Plan", "ResolvedSpec", "SimResult", "SpecConfig", "Workload", "optimize", "plan",
           "resolve", "simulate"]
