"""Latency models: seconds for one forward pass as a function of batch, new tokens per sequence, context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calibration.errors import ConfigError, check_number, show

KINDS = ("constant", "linear", "piecewise", "roofline")
_ROOFLINE_KEYS = ("weight_bytes", "flops_per_token", "kv_bytes_per_token", "attn_flops_per_ctx",
                  "peak_flops", "mem_bw", "efficiency", "overhead_s", "comm_base_s", "comm_per_token_s")


@dataclass(frozen=True)
class LatencyModel:
    """t(batch, new_tokens, context) in seconds. kind picks the form; params are JSON-able numbers/lists.

    - constant: {"s"}
    - linear: {"base", "per_token", "per_context"}: base + per_token*batch*new + per_context*batch*context
    - piecewise: {"knots_x", "knots_y", "per_context"}: piecewise-linear in batch*new (linear extrapolation)
      plus per_context*batch*context
    - linear and piecewise, optional {"single_ratio"}: the measured / fitted ratio of one row's single-token
      forward (a matrix-vector product, another kernel than the matrix products around it), applied there only
    - roofline: max(compute, memory) time from hardware peaks and model shape, plus overheads; optional
      {"flops_efficiency", "multi_token_s", "token_s", "score_bytes_per_qk", "logit_bytes_per_token"}: a software
      stack's costs
      (calibration.stack)
    """

    kind: str
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError("latency.kind", f"unknown kind {show(self.kind)}", " | ".join(KINDS))
        p = self.params
        need = {"constant": ("s",), "linear": ("base", "per_token"), "piecewise": ("knots_x", "knots_y"),
                "roofline": _ROOFLINE_KEYS}[self.kind]
        for key in need:
            if key not in p:
                raise ConfigError(f"latency.params.{key}", f"missing for kind {self.kind!r}", ", ".join(need))
        if self.kind == "piecewise":
            xs, ys = p["knots_x"], p["knots_y"]
            for key, v in (("knots_x", xs), ("knots_y", ys)):
                if not isinstance(v, list | tuple):
                    raise ConfigError(f"latency.params.{key}", f"must be a list, got {type(v).__name__}",
                                      "a list of numbers")
            for i, x in enumerate(xs):
                check_number(f"latency.params.knots_x[{i}]", x, 0.0)
            if len(xs) != len(ys) or len(xs) < 1:
                raise ConfigError("latency.params.knots_x", "knots_x and knots_y must have equal, nonzero length",
                                  "lists of equal length >= 1")
            if any(b <= a for a, b in zip(xs, xs[1:])):
                raise ConfigError("latency.params.knots_x", "must be strictly increasing", "increasing token counts")
            for i, y in enumerate(ys):
                check_number(f"latency.params.knots_y[{i}]", y, 0.0)
            if "per_context" in p:
                check_number("latency.params.per_context", p["per_context"], 0.0)
        else:
            for key, v in p.items():
                check_number(f"latency.params.{key}", v, 0.0)
            if self.kind == "roofline":
                for key in ("peak_flops", "mem_bw", "efficiency") + (("flops_efficiency",) * ("flops_efficiency" in p)):
                    check_number(f"latency.params.{key}", p[key], 0.0, lo_open=True)
        if "single_ratio" in p:
            check_number("latency.params.single_ratio", p["single_ratio"], 0.0, 10.0, lo_open=True)

    # constructors -------------------------------------------------------------------------------
    @classmethod
    def constant(cls, s: float) -> LatencyModel:
        """Fixed latency regardless of shape (the closed forms' assumption)."""
        return cls("constant", {"s": float(s)})

    @classmethod
    def linear(cls, base: float, per_token: float = 0.0, per_context: float = 0.0) -> LatencyModel:
        """base + per_token * (batch*new_tokens) + per_context * (batch*context)."""
        return cls("linear", {"base": float(base), "per_token": float(per_token), "per_context": float(per_context)})

    @classmethod
    def piecewise(cls, knots_x: list[float], knots_y: list[float], per_context: float = 0.0) -> LatencyModel:
        """Piecewise-linear in total new tokens (batch*new_tokens), plus a context term; used by fits."""
        return cls("piecewise", {"knots_x": [float(x) for x in knots_x], "knots_y": [float(y) for y in knots_y],
                                 "per_context": float(per_context)})

    # evaluation ---------------------------------------------------------------------------------
    def __call__(self, batch: int = 1, new_tokens: int = 1, context: float = 0.0) -> float:
        """Seconds for one forward of `batch` sequences, each adding `new_tokens` after `context` tokens."""
        p = self.params
        tokens = batch * new_tokens
        if self.kind == "constant":
            return p["s"]
        if self.kind == "linear":
            t = p["base"] + p["per_token"] * tokens + p.get("per_context", 0.0) * batch * context
        elif self.kind == "piecewise":
            t = _piecewise(p["knots_x"], p["knots_y"], tokens) + p.get("per_context", 0.0) * batch * context
        else:
            return _roofline(p, batch, new_tokens, context)
        return t * p["single_ratio"] if tokens == 1 and "single_ratio" in p else t

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, d: dict, where: str = "latency") -> LatencyModel:
        if not isinstance(d, dict) or "kind" not in d:
            raise ConfigError(where, "must be an object with 'kind' and 'params'", "{kind, params}")
        if not isinstance(d.get("params", {}), dict):
            raise ConfigError(f"{where}.params", f"must be an object, got {type(d['params']).__name__}",
                              "{name: number}")
        try:
            return cls(d["kind"], dict(d.get("params", {})))
        except ConfigError as e:
            raise ConfigError(f"{where}.{e.field.removeprefix('latency.')}", e.problem, e.allowed) from None


def _piecewise(xs: list[float], ys: list[float], x: float) -> float:
    if len(xs) == 1:
        return ys[0]
    if x <= xs[0]:
        slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
        return max(0.0, ys[0] + slope * (x - xs[0]))
    if x >= xs[-1]:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return ys[-1] + max(0.0, slope) * (x - xs[-1])
    return float(np.interp(x, xs, ys))


def _roofline(p: dict, batch: int, new_tokens: int, context: float) -> float:
    """Bound + overheads; the optional stack terms (calibration.stack) default to 0 so older profiles load."""
    tokens = batch * new_tokens
    flops = tokens * p["flops_per_token"] + tokens * (context + new_tokens) * p["attn_flops_per_ctx"]
    nbytes = p["weight_bytes"] + batch * (context + new_tokens) * p["kv_bytes_per_token"]
    eff = p["efficiency"]
    compute = flops / (p["peak_flops"] * p.get("flops_efficiency", eff))
    memory = nbytes / (p["mem_bw"] * eff)
    pairs = tokens * (context + new_tokens)  # (query, key) pairs: attention scores and mask of tree/verify steps
    streamed = pairs * p.get("score_bytes_per_qk", 0.0) + tokens * p.get("logit_bytes_per_token", 0.0)
    stack = (p.get("multi_token_s", 0.0) * (new_tokens > 1) + p.get("token_s", 0.0) * tokens
             + streamed / (p["mem_bw"] * eff))
    return p["overhead_s"] + max(compute, memory) + p["comm_base_s"] + p["comm_per_token_s"] * tokens + stack
