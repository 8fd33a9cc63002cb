"""Software-stack levels for the roofline: the fixed and per-token costs a real serving stack adds to the bound.

One forward of `batch` sequences adding `new` tokens after `context` cached ones costs, per device,
    forward_s + layers * layer_s                                  (sampling, host sync; launches, norms, small kernels)
    + [new > 1] * layers * multi_token_layer_s                    (mask building, the non-decode attention path)
    + batch * new * layers * token_layer_s                        (per-token work that graphs do not remove)
    + max(FLOPs / (peak * flops_efficiency), bytes / (bw * bw_efficiency))      (the roofline itself)
    + batch * new * (context + new) * layers * (heads * score_bytes + mask_bytes) / (bw * bw_efficiency)
                                                                  (attention over tree/verify branches: scores, mask)
    + batch * new * vocab * sample_bytes / (bw * bw_efficiency)   (logits written, softmax / top-k passes: sampling)
    + 2 * layers * allreduce_s  (tensor parallel) + ring all-reduce bytes.
Levels: "serving" (an optimized serving stack: vLLM / SGLang class, CUDA graphs, fused kernels, flash attention),
"saguaro" (our executor as measured on the H200, CUDA graphs on), "bound" (the bare roofline with the hardware
presets' assumed launch floors: what the presets used before the stack terms). The numbers below are the output of
`calibration.stack_fit.fit_level` on the points in `calibration.stack_points` (a test checks they agree).
Fixed-time terms were measured on H100/H200 and are scaled to other hardware by its launch floor and all-reduce
latency relative to the H100's (an assumption, stated in each profile's provenance).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from calibration.errors import ConfigError, check_number

# H100/H200 reference values of the Hardware presets that scale the fitted fixed times to other hardware
REF_LAUNCH_S = 4e-6
REF_ALLREDUCE_S = 8e-6
REF_EFFICIENCY = 0.7
FITTED = ("bw_efficiency", "forward_s", "layer_s", "multi_token_layer_s", "token_layer_s", "score_bytes",
          "allreduce_s")


@dataclass(frozen=True)
class Stack:
    """Cost terms of one software stack (seconds and bytes as in the module docstring)."""

    name: str
    description: str
    bw_efficiency: float
    flops_efficiency: float
    forward_s: float
    layer_s: float
    multi_token_layer_s: float
    token_layer_s: float
    score_bytes: float
    mask_bytes: float
    allreduce_s: float
    sample_bytes: float = 0.0  # bytes moved per logit of every output row (logits + sampling passes)
    uses_hardware_floors: bool = False  # "bound": take forward/layer/all-reduce times from the Hardware preset

    def __post_init__(self) -> None:
        for key in ("bw_efficiency", "flops_efficiency"):
            check_number(f"stack.{key}", getattr(self, key), 0.0, 1.0, lo_open=True)
        for key in ("forward_s", "layer_s", "multi_token_layer_s", "token_layer_s", "allreduce_s"):
            check_number(f"stack.{key}", getattr(self, key), 0.0, 1.0)
        for key in ("score_bytes", "mask_bytes", "sample_bytes"):
            check_number(f"stack.{key}", getattr(self, key), 0.0, 1e3)

    def with_(self, **changes: float) -> Stack:
        """A copy with some terms replaced (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """Plain numbers (for provenance)."""
        return asdict(self)


STACKS: dict[str, Stack] = {
    # fitted by calibration.stack_fit.fit_level("serving") (`python bench/bench_presets.py --print-stacks`)
    "serving": Stack("serving", "optimized serving stack (vLLM / SGLang class: CUDA graphs, fused kernels, "
                     "flash attention); fitted to published vLLM / NIM step times",
                     bw_efficiency=0.7577, flops_efficiency=0.7000, forward_s=2.0663e-04, layer_s=3.6140e-05,
                     multi_token_layer_s=1.0000e-05, token_layer_s=2.5000e-07, score_bytes=0.0000, mask_bytes=0.1250,
                     allreduce_s=1.5078e-05, sample_bytes=8.0000),
    # fitted by calibration.stack_fit.fit_level("saguaro")
    "saguaro": Stack("saguaro", "our executor as measured on the H200 (CUDA graphs on, SDPA with boolean "
                     "tree masks); fitted to bench/gpu_results/2026-11-30-h200",
                     bw_efficiency=0.7390, flops_efficiency=0.7000, forward_s=2.2538e-04, layer_s=8.7579e-05,
                     multi_token_layer_s=2.6384e-05, token_layer_s=1.5331e-06, score_bytes=9.0782, mask_bytes=1.0000,
                     allreduce_s=3.0156e-05, sample_bytes=16.0000),
    "bound": Stack("bound", "bare roofline: datasheet peaks x the hardware preset's efficiency, its assumed "
                   "launch floors, no per-token or tree-attention costs", bw_efficiency=0.7, flops_efficiency=0.7,
                   forward_s=0.0, layer_s=0.0, multi_token_layer_s=0.0, token_layer_s=0.0, score_bytes=0.0,
                   mask_bytes=0.0, allreduce_s=0.0, uses_hardware_floors=True),
}


def get_stack(stack: str | Stack) -> Stack:
    """A stack level by name (a Stack passes through); ConfigError names `stack` and the known levels."""
    if isinstance(stack, Stack):
        return stack
    key = str(stack).strip().lower()
    if key not in STACKS:
        raise ConfigError("stack", f"unknown stack level {stack!r}", ", ".join(STACKS))
    return STACKS[key]
