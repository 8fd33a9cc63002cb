"""The ``meta`` record of a run's Measurements: what ran, where, with which resolved choices."""

from __future__ import annotations

import datetime as _dt
import platform

import torch

from saguaro_exec.config import RunConfig
from saguaro_exec.measure.achieved import resolve_hardware, shape_dict
from saguaro_exec.prepare import Prepared, source_name


def run_meta(config: RunConfig, p: Prepared) -> dict:
    """Every key calibration and the report read (``draft_pid`` and ``graph_captures`` are filled in as
    the run goes)."""
    spec, dtype, ddev = config.spec, getattr(torch, config.dtype), p.draft_device
    drafts = spec.mode != "ar"
    meta = {"spec": spec.to_dict(), "mode": spec.mode, "fanout": list(p.fanout), "fanout_miss": list(p.fanout_miss),
            "backup_resolved": p.backup if spec.mode == "ssd" else None, "resolved": p.resolved.to_dict(),
            "resolved_with": p.resolved_with, "target": source_name(p.target_src),
            "draft": source_name(p.draft_src) if drafts else None, "device": config.device,
            "draft_device": ddev, "target_devices": config.resolved_target_devices,
            "tp_size": len(config.resolved_target_devices), "dtype": str(dtype), "threads": p.threads,
            "seed": config.seed, "max_new_tokens": config.max_new_tokens, "draft_pid": None,
            "load_mode": config.arrivals is not None,     # requests on the wall clock: idle gaps (fit_idle.py)
            "draft_processes": 1 if spec.mode == "ssd" else 0,   # draft_devices > 1 still runs one
            "machine": platform.node(), "dtype_bytes": dtype.itemsize,
            "target_shape": shape_dict(p.target.config, "target"),
            "draft_shape": shape_dict(p.draft_config, "draft") if drafts else None,
            "hardware": resolve_hardware(config.hardware, config.device),
            "draft_hardware": resolve_hardware(config.hardware, ddev) if drafts else None,
            "cuda_graphs": p.accel.graphs, "attention": p.accel.attention,
            "draft_cuda_graphs": p.daccel.graphs if drafts else None,
            "draft_attention": p.daccel.attention if drafts else None,
            "torch": torch.__version__, "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
    if spec.mode == "ssd":
        meta["ssd_protocol"] = p.protocol
    meta["lossless"] = config.synthetic is None       # False: synthetic acceptance, timing only
    meta["synthetic"] = None if config.synthetic is None else config.synthetic.to_dict(spec.k)
    return meta
