"""Profiles and measurements: the data the simulator runs on and the executor produces (no torch)."""

from calibration.acceptance import AcceptanceModel
from calibration.errors import ConfigError
from calibration.fit import fit
from calibration.hits import HitCurve
from calibration.latency import LatencyModel
from calibration.measurements import Measurements
from calibration.profile import Profile, list_presets, load_preset
from calibration.roofline import roofline

__all__ = ["AcceptanceModel", "ConfigError", "HitCurve", "LatencyModel", "Measurements", "Profile", "fit",
           "list_presets", "load_preset", "roofline"]
