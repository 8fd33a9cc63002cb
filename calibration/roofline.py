"""Roofline cost model: target and draft latencies from hardware peaks and model shapes, no GPU needed.

One forward of b sequences adding n tokens after L context tokens costs
    overhead + max(FLOPs / (peak * eff), bytes / (bandwidth * eff)) + tensor-parallel all-reduces,
with bytes = weights (per device) + KV cache read, FLOPs = 2 * weights * tokens + attention.
The formula itself lives in `calibration.latency._roofline`; this module derives its parameters.
"""

from __future__ import annotations

from calibration.acceptance import AcceptanceModel
from calibration.errors import ConfigError, check_choice, check_number
from calibration.hardware import Hardware, get_hardware
from calibration.hits import HitCurve
from calibration.latency import LatencyModel
from calibration.profile import Profile
from calibration.shapes import ModelShape, get_shape
from calibration.stack import REF_ALLREDUCE_S, REF_EFFICIENCY, REF_LAUNCH_S, Stack, get_stack

LINKS = ("nvlink", "pcie")
ASSUMED = "assumed from the paper's reported ranges, not measured"

# Saguaro sampling trade-off (sampler C -> multiplier): lower C, lower acceptance, fewer cache misses.
PAPER_ACCEPT_C = {0.75: 0.98, 0.5: 0.95, 0.25: 0.9, 0.0: 0.85}
PAPER_MISS_C = {0.75: 0.9, 0.5: 0.8, 0.25: 0.7, 0.0: 0.62}


def paper_acceptance(alpha_t0: float = 0.8, alpha_t07: float = 0.7) -> AcceptanceModel:
    """Geometric acceptance at T=0 and T=0.7 with the C trade-off; orientation values from the paper."""
    return AcceptanceModel({0.0: (alpha_t0,), 0.7: (alpha_t07,)}, dict(PAPER_ACCEPT_C))


def paper_hits(c: float = 0.27, r: float = 0.53) -> HitCurve:
    """Power-law miss curves (Definition 11) at T=0 and T=0.7, primary and backup; orientation values."""
    table = {0.0: {"primary": {"c": c, "r": r}, "backup": {"c": c * 1.5, "r": r * 0.95}},
             0.7: {"primary": {"c": c * 1.7, "r": r * 0.85}, "backup": {"c": c * 2.4, "r": r * 0.8}}}
    return HitCurve(table, dict(PAPER_MISS_C))


def model_costs(shape: str | ModelShape, tp: int = 1, dtype_bytes: float = 2) -> dict[str, float]:
    """Per-device byte and FLOP counts of one model on `tp` devices: weight_bytes (streamed by every
    forward: layers + LM head, vocab-parallel), flops_per_token (2 x those weights), kv_bytes_per_token
    (K and V of all layers for one token), attn_flops_per_ctx (QK^T and PV per query-key pair)."""
    m = get_shape(shape)
    check_number("tp", tp, 1, 64, integer=True)
    check_number("dtype_bytes", dtype_bytes, 0.25, 8)
    kv_dev = m.kv_heads_per_device(tp)
    layer = (m.hidden * m.head_dim * (2 * m.heads / tp + 2 * kv_dev) + 3 * m.hidden * m.intermediate / tp
             + 2 * m.hidden)
    params_dev = m.layers * layer + m.vocab * m.hidden / tp + m.hidden  # layers + LM head (vocab-parallel)
    return {"weight_bytes": float(params_dev * dtype_bytes),
            "flops_per_token": float(2 * params_dev),
            "kv_bytes_per_token": float(2 * m.layers * kv_dev * m.head_dim * dtype_bytes),
            "attn_flops_per_ctx": float(4 * m.layers * (m.heads / tp) * m.head_dim)}


def roofline_params(hardware: str | Hardware, shape: str | ModelShape, tp: int = 1, dtype_bytes: float = 2,
                    efficiency: float | None = None, stack: str | Stack | None = None) -> dict:
    """The `roofline` LatencyModel parameters for one model on `tp` devices of one hardware type.

    stack=None (or "bound") is the bare roofline; "serving" / "saguaro" (or a Stack) add that stack's fixed,
    per-token, tree-attention and all-reduce costs (calibration.stack), scaled to this hardware.
    """
    hw, m = get_hardware(hardware), get_shape(shape)
    costs = model_costs(m, tp, dtype_bytes)
    st = get_stack(stack if stack is not None else "bound")
    # fitted efficiencies are H100/H200 values: other hardware keeps its preset's efficiency ratio to them
    eff_default = hw.efficiency if st.uses_hardware_floors else st.bw_efficiency * hw.efficiency / REF_EFFICIENCY
    eff = (min(0.95, eff_default) if efficiency is None
           else check_number("efficiency", efficiency, 0.0, 1.0, lo_open=True))
    launch = hw.launch_s_per_layer / REF_LAUNCH_S  # fitted fixed times are H100/H200 values
    allreduce = hw.allreduce_latency_s if st.uses_hardware_floors else st.allreduce_s * hw.allreduce_latency_s / REF_ALLREDUCE_S
    if tp > 1:  # two all-reduces per layer (after attention and after the MLP), ring algorithm
        comm_base = 2 * m.layers * allreduce
        comm_per_token = 2 * m.layers * (2 * (tp - 1) / tp) * m.hidden * dtype_bytes / hw.nvlink_bw
    else:
        comm_base = comm_per_token = 0.0
    if st.uses_hardware_floors:
        overhead = hw.fixed_s + m.layers * hw.launch_s_per_layer
    else:
        overhead = launch * (st.forward_s + m.layers * st.layer_s)
    params = {**costs, "peak_flops": float(hw.peak_flops), "mem_bw": float(hw.mem_bw), "efficiency": float(eff),
              "overhead_s": float(overhead), "comm_base_s": float(comm_base), "comm_per_token_s": float(comm_per_token)}
    if not st.uses_hardware_floors:
        flops_eff = min(0.95, st.flops_efficiency * hw.efficiency / REF_EFFICIENCY)
        params.update({"flops_efficiency": float(flops_eff),
                       "multi_token_s": float(launch * m.layers * st.multi_token_layer_s),
                       "token_s": float(launch * m.layers * st.token_layer_s),
                       "score_bytes_per_qk": float(m.layers * (m.heads / tp * st.score_bytes + st.mask_bytes)),
                       "logit_bytes_per_token": float(m.vocab * st.sample_bytes)})
    return params


def model_latency(hardware: str | Hardware, shape: str | ModelShape, tp: int = 1, dtype_bytes: float = 2,
                  efficiency: float | None = None, stack: str | Stack | None = None) -> LatencyModel:
    """Roofline LatencyModel t(batch, new_tokens, context) for one model on `tp` devices (stack: as roofline_params)."""
    return LatencyModel("roofline", roofline_params(hardware, shape, tp, dtype_bytes, efficiency, stack))


def link_params(hardware: str | Hardware, link: str = "nvlink") -> tuple[float, float]:
    """(one-way latency s, bytes/s) of the draft-target link over NVLink (or Infinity Fabric) or PCIe."""
    hw = get_hardware(hardware)
    check_choice("link", link, LINKS)
    return (hw.p2p_latency_s, hw.nvlink_bw) if link == "nvlink" else (hw.pcie_latency_s, hw.pcie_bw)


def roofline(hardware: str | Hardware = "h100", target: str | ModelShape = "llama-3.1-70b", target_tp: int = 4,
             draft: str | ModelShape = "llama-3.2-1b", draft_tp: int = 1, acceptance: AcceptanceModel | None = None,
             hits: HitCurve | None = None, dtype_bytes: float = 2, efficiency: float | None = None,
             link: str = "nvlink", fast_backup_s: float = 3e-5, name: str | None = None,
             stack: str | Stack = "serving") -> Profile:
    """A Profile for (hardware, target on target_tp devices, draft on draft_tp devices) from the roofline.

    stack picks the software level the latencies model (calibration.stack): "serving" (default: an optimized
    serving stack, vLLM / SGLang class), "saguaro" (our executor as measured on the H200, CUDA graphs on) or
    "bound" (the bare roofline, no per-layer, per-token or tree-attention costs). acceptance / hits default to
    the paper's orientation values (geometric alpha, power-law misses).
    """
    hw = get_hardware(hardware)
    t, d = get_shape(target, "target"), get_shape(draft, "draft")
    for field, tp in (("target_tp", target_tp), ("draft_tp", draft_tp)):
        try:
            check_number(field, tp, 1, 64, integer=True)
        except ConfigError as e:
            raise ConfigError(field, e.problem, e.allowed) from None
    if acceptance is not None and not isinstance(acceptance, AcceptanceModel):
        raise ConfigError("acceptance", f"expected AcceptanceModel, got {type(acceptance).__name__}",
                          "AcceptanceModel")
    if hits is not None and not isinstance(hits, HitCurve):
        raise ConfigError("hits", f"expected HitCurve, got {type(hits).__name__}", "HitCurve")
    if t.vocab != d.vocab:
        raise ConfigError("draft", f"vocab {d.vocab} differs from the target's {t.vocab}",
                          "a draft sharing the target's tokenizer")
    link_s, link_bw = link_params(hw, link)
    st = get_stack(stack)
    tgt = model_latency(hw, t, target_tp, dtype_bytes, efficiency, st)
    drf = model_latency(hw, d, draft_tp, dtype_bytes, efficiency, st)
    tp_part = f"-tp{target_tp}" if target_tp > 1 else ""
    name = name or f"{hw.name}-{t.name}{tp_part}-{d.name}"
    provenance = {"source": "roofline", "hardware": hw.to_dict(), "target": t.to_dict(), "target_tp": target_tp,
                  "target_devices": target_tp, "draft": d.to_dict(), "draft_tp": draft_tp, "dtype_bytes": dtype_bytes, "link": link,
                  "efficiency": tgt.params["efficiency"], "stack": st.to_dict(),
                  "acceptance": "given" if acceptance is not None else ASSUMED,
                  "hits": "given" if hits is not None else ASSUMED,
                  "notes": "peaks from vendor datasheets; " + (
                      "latencies, launch floors and efficiency assumed" if st.uses_hardware_floors else
                      f"stack terms fitted to measured step times ({st.name}, calibration/stack_points.py), "
                      "fixed times scaled from H100/H200 by the hardware's launch floor and all-reduce latency")}
    return Profile(name=name, target=tgt, draft=drf, link_s=link_s, link_bytes_per_s=link_bw,
                   acceptance=acceptance or paper_acceptance(), hits=hits or paper_hits(),
                   fast_backup_s=fast_backup_s, vocab_size=t.vocab, provenance=provenance)
