"""Serving under load: request streams, continuous batching of AR / SD / SSD, latency metrics, capacity plans."""

from saguaro_sim.load.metrics import SLO, LoadResult
from saguaro_sim.load.planner import LoadPlan, crossovers, plan
from saguaro_sim.load.schedule import ConfigSchedule, best_schedule
from saguaro_sim.load.serve import simulate_load
from saguaro_sim.load.stream import Lengths, RequestStream, load_trace, poisson_stream, write_trace

__all__ = ["SLO", "ConfigSchedule", "Lengths", "LoadPlan", "LoadResult", "RequestStream", "best_schedule", "crossovers",
           "load_trace", "plan", "poisson_stream", "simulate_load", "write_trace"]
