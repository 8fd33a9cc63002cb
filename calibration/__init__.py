"""Profiles and measurements: the data the simulator runs on and the executor produces (no torch)."""

from calibration.acceptance import AcceptanceModel
from calibration.errors import ConfigError
from calibration.hits import HitCurve
from calibration.latency import LatencyModel
from calibration.measurements import Measurements
from calibration.profile import Profile, list_presets, load_preset

__all__ = ["AcceptanceModel", "ConfigError", "HitCurve", "LatencyModel", "Measurements", "Profile",
           "list_presets", "load_preset"]

try:  # filled in by the roofline / fitting modules as they land
    from calibration.roofline import roofline  # noqa: F401

    __all__.append("roofline")
except ImportError:  # pragma: no cover
    pass
try:
    from calibration.fit import fit  # noqa: F401

    __all__.append("fit")
except ImportError:  # pragma: no cover
    pass
