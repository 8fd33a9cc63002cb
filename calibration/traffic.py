"""Bytes moved and FLOPs of one forward, and what a measured time makes of them (achieved rate, roofline share).

One forward of `batch` sequences adding `new_tokens` each after `context` cached tokens moves
    weights once (layers + LM head; the input embedding is a row gather)
    + KV cache read (batch x context tokens) + KV written (batch x new_tokens) + logits written,
and computes 2 x weights x tokens + attention (4 x layers x heads x head_dim per query-key pair).
The per-token counts are `roofline.model_costs`, the same ones the roofline latency model uses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from calibration.errors import check_number
from calibration.hardware import Hardware, get_hardware
from calibration.roofline import model_costs
from calibration.shapes import ModelShape, get_shape


@dataclass(frozen=True)
class Traffic:
    """Bytes (by kind) and FLOPs of one or more forwards; `+` adds two."""

    weight_bytes: float = 0.0
    kv_read_bytes: float = 0.0
    kv_write_bytes: float = 0.0
    logits_bytes: float = 0.0
    flops: float = 0.0

    @property
    def bytes(self) -> float:
        """All bytes moved: weights + KV read + KV written + logits."""
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes + self.logits_bytes

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(*(a + b for a, b in zip(asdict(self).values(), asdict(other).values())))

    def to_dict(self) -> dict[str, float]:
        """The parts plus the byte total."""
        return {**asdict(self), "bytes": self.bytes}


def forward_traffic(shape: str | ModelShape, batch: float, new_tokens: float, context: float,
                    dtype_bytes: float = 2, logits_bytes: float = 4) -> Traffic:
    """Traffic of one forward (tp = 1); `context` is the mean cached length per sequence before it,
    `logits_bytes` the size of one logit as written (the executor returns float32 logits)."""
    m = get_shape(shape)
    check_number("batch", batch, 0)
    check_number("new_tokens", new_tokens, 0)
    check_number("context", context, 0)
    check_number("logits_bytes", logits_bytes, 0, 8)
    c = model_costs(m, 1, dtype_bytes)
    tokens = batch * new_tokens
    return Traffic(weight_bytes=c["weight_bytes"],
                   kv_read_bytes=batch * context * c["kv_bytes_per_token"],
                   kv_write_bytes=tokens * c["kv_bytes_per_token"],
                   logits_bytes=tokens * m.vocab * logits_bytes,
                   flops=tokens * c["flops_per_token"] + tokens * (context + new_tokens) * c["attn_flops_per_ctx"])


def achieved_rates(traffic: Traffic, seconds: float, hardware: str | Hardware | None = None,
                   devices: int = 1) -> dict:
    """Achieved bytes/s and FLOP/s of `traffic` done in `seconds`, with their fractions of the peak HBM
    bandwidth and dense FLOP/s of `devices` such devices (None when `hardware` is None: peak unknown)."""
    check_number("seconds", seconds, 0)
    check_number("devices", devices, 1, 1024, integer=True)
    bw = traffic.bytes / seconds if seconds > 0 else 0.0
    fl = traffic.flops / seconds if seconds > 0 else 0.0
    hw = None if hardware is None else get_hardware(hardware)
    return {"seconds": seconds, **traffic.to_dict(), "bytes_per_s": bw, "flops_per_s": fl,
            "hardware": None if hw is None else hw.name,
            "bandwidth_fraction": None if hw is None else bw / (devices * hw.mem_bw),
            "flops_fraction": None if hw is None else fl / (devices * hw.peak_flops)}
