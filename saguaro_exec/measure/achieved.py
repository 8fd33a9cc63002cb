"""Achieved memory bandwidth and FLOP/s of a run's forwards, as fractions of the device's roofline.

From the per-round phase times: the target's forwards (AR decode: 1 token per sequence; SD/SSD verify:
K + 1) and the draft's (SD: K one-token steps; SSD: the glue forward of K + 1 tokens, then K tree steps of
N = sum(fanout) branches). Only the rows still generating are counted (finished rows ride along in the
batch; their work is not useful). Bytes and FLOPs come from ``calibration.traffic.forward_traffic``.
"""

from __future__ import annotations

from dataclasses import asdict

from calibration.hardware import get_hardware
from calibration.shapes import ModelShape
from calibration.traffic import Traffic, achieved_rates, forward_traffic
from saguaro_exec.devices import is_cuda

# substrings of torch.cuda.get_device_name -> hardware preset (the presets are the SXM/OAM parts)
_DEVICE_NAMES = (("h200", "h200"), ("h100", "h100"), ("a100", "a100"), ("b200", "b200"), ("mi300x", "mi300x"))
_OTHER_PARTS = ("pcie", "40gb")   # different HBM bandwidth from the preset: peak unknown unless given


def preset_for_device_name(name: str) -> str | None:
    """The hardware preset for a CUDA device name ("NVIDIA H200" -> "h200"), None when not one of ours."""
    low = name.lower().replace(" ", "")
    if any(p in low for p in _OTHER_PARTS):
        return None
    return next((preset for key, preset in _DEVICE_NAMES if key in low), None)


def resolve_hardware(given: str | None, device: str) -> str | None:
    """The preset name for ``device``: as given (validated), else detected on CUDA, else None (peak unknown)."""
    if given is not None:
        return get_hardware(given).name
    if not is_cuda(device):
        return None
    import torch

    return preset_for_device_name(torch.cuda.get_device_name(device))


def shape_dict(config, name: str) -> dict:
    """A ModelConfig as ``calibration.shapes.ModelShape`` fields (plain dict, for the run's meta)."""
    return asdict(ModelShape(name, config.num_layers, config.hidden_size, config.num_heads, config.num_kv_heads,
                             config.head_dim, config.intermediate_size, config.vocab_size,
                             config.tie_word_embeddings))


def _side(traffic: Traffic, seconds: float, forwards: int, phase: str, hardware: str | None,
          devices: int = 1) -> dict:
    return {"phase": phase, "forwards": forwards, "peak": hardware or "unknown", "devices": devices,
            **achieved_rates(traffic, seconds, hardware, devices)}


def achieved(mode: str, k: int, rounds: list[dict], meta: dict) -> dict:
    """{"target": rates, "draft": rates | None} over all rounds; rates as ``calibration.traffic.achieved_rates``
    plus the phase and forward count. ``meta`` holds target_shape / draft_shape (ModelShape fields),
    dtype_bytes, fanout, hardware and draft_hardware (preset names or None), and tp_size (target devices,
    default 1: a tensor-parallel target's fractions are of all its devices' peaks together)."""
    tshape = ModelShape(**meta["target_shape"])
    dshape = ModelShape(**meta["draft_shape"]) if meta.get("draft_shape") else None
    dtb = meta["dtype_bytes"]
    branches = max(1, sum(meta.get("fanout") or [1]))
    t_traffic, d_traffic = Traffic(), Traffic()
    t_s = d_s = 0.0
    t_n = d_n = 0
    for row in rounds:
        n = row.get("batch", 0)
        if n <= 0:
            continue
        ctx = sum(row["context"]) / n
        how = "ar" if mode == "ar" else row.get("fallback", mode)
        t_traffic += forward_traffic(tshape, n, 1 if how == "ar" else k + 1, ctx, dtb)
        t_s += row.get("verify_s", 0.0)
        t_n += 1
        if dshape is None or how == "ar":
            continue
        if how == "sd":
            steps = [(1, ctx + i) for i in range(k)]
            secs = row.get("draft_reply_s", 0.0)
        else:
            secs = row.get("glue_s", 0.0) + row.get("tree_s", 0.0)
            steps = [(k + 1, ctx)] + [(branches, ctx + k + i * branches) for i in range(k)] if secs > 0 else []
        for new, c in steps:
            d_traffic += forward_traffic(dshape, n, new, c, dtb)
        d_s += secs
        d_n += len(steps)
    phase = "decode" if mode == "ar" else "verify"
    target = _side(t_traffic, t_s, t_n, phase, meta.get("hardware"), meta.get("tp_size", 1))
    draft = None if dshape is None or mode == "ar" else _side(
        d_traffic, d_s, d_n, "decode" if mode == "sd" else "glue+tree", meta.get("draft_hardware"))
    return {"target": target, "draft": draft}
