"""Running half of saguaro: a real, lossless AR / SD / SSD executor (torch), with measurements."""

from saguaro_exec.config import RunConfig
from saguaro_exec.measure.report import RunReport
from saguaro_exec.run import run

__all__ = ["RunConfig", "RunReport", "run"]
