"""Running half of saguaro: a real, lossless AR / SD / SSD executor (torch), with measurements."""

from saguaro_exec.report import RunReport
from saguaro_exec.run import run
from saguaro_exec.runconfig import RunConfig

__all__ = ["RunConfig", "RunReport", "run"]
