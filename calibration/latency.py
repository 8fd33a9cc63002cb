"""Latency models: seconds for one forward pass as a function of batch, new tokens per sequence, context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calibration.errors import ConfigError, check_number, show

KINDS = ("constant", "linear", "piecewise", "roofline")
MAX_TILE = 64
_TAIL_KEYS = ("tile", "tail_s")
_ROOFLINE_KEYS = ("weight_bytes", "flops_per_token", "kv_bytes_per_token", "attn_flops_per_ctx",
                  "peak_flops", "mem_bw", "efficiency", "overhead_s", "comm_base_s", "comm_per_token_s")


@dataclass(frozen=True)
class LatencyModel:
    """t(batch, new_tokens, context) in seconds. kind picks the form; params are JSON-able numbers/lists.

    - constant: {"s"}
    - linear: {"base", "per_token", "per_context"}: base + per_token*batch*new + per_context*batch*context
    - piecewise: {"knots_x", "knots_y", "per_context"}: piecewise-linear in batch*new (linear extrapolation)
      plus per_context*batch*context
    - linear and piecewise, optional {"per_pair"}: + per_pair*batch*new*context, attention's (query, key)
      pairs
    - linear and piecewise, optional {"single_ratio"}: the measured / fitted ratio of one row's single-token
      forward (a matrix-vector product, another kernel than the matrix products around it), applied there only
    - linear and piecewise, optional {"tile", "tail_s"}: seconds added when the new tokens per sequence
      (> 1) are not a multiple of `tile`, tail_s[r - 1] for remainder r: the kernels work in blocks of rows
      and a partial block costs extra (the deep pair on the 2-core box: blocks of 4, +3-8%, 2026-12-07;
      GPUs: tile quantization). Keyed on new tokens, not batch*new: at batch 4 the deep target's 3 new tokens
      still cost more than 4, and that form fit the profile better
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
            for key in ("per_context", "per_pair"):
                if key in p:
                    check_number(f"latency.params.{key}", p[key], 0.0)
        else:
            for key, v in p.items():
                if key not in _TAIL_KEYS:
                    check_number(f"latency.params.{key}", v, 0.0)
            if self.kind == "roofline":
                for key in ("peak_flops", "mem_bw", "efficiency") + (("flops_efficiency",) * ("flops_efficiency" in p)):
                    check_number(f"latency.params.{key}", p[key], 0.0, lo_open=True)
        if "single_ratio" in p:
            check_number("latency.params.single_ratio", p["single_ratio"], 0.0, 10.0, lo_open=True)
        _check_tail(self.kind, p)

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
        t += p.get("per_pair", 0.0) * tokens * context
        rem = int(round(new_tokens)) % p["tile"] if "tile" in p else 0
        if rem and new_tokens > 1:
            t = max(0.0, t + p["tail_s"][rem - 1])
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


def _check_tail(kind: str, p: dict) -> None:
    """tile and tail_s come together, on the fitted forms only: an integer tile in [2, MAX_TILE] and tile - 1
    numbers of seconds (a fit may find a small negative one; the sum is kept >= 0 where it is used)."""
    have = [k for k in _TAIL_KEYS if k in p]
    if not have:
        return
    if kind not in ("linear", "piecewise"):
        raise ConfigError(f"latency.params.{have[0]}", f"not a parameter of kind {kind!r}", "linear | piecewise")
    if len(have) == 1:
        missing = ({*_TAIL_KEYS} - set(have)).pop()
        raise ConfigError(f"latency.params.{missing}", f"missing beside {have[0]}", "tile and tail_s together")
    check_number("latency.params.tile", p["tile"], 2, MAX_TILE, integer=True)
    tail = p["tail_s"]
    if not isinstance(tail, list | tuple) or len(tail) != int(p["tile"]) - 1:
        raise ConfigError("latency.params.tail_s", f"must be a list of tile - 1 = {int(p['tile']) - 1} numbers",
                          "one number of seconds per remainder 1 .. tile - 1")
    for i, v in enumerate(tail):
        check_number(f"latency.params.tail_s[{i}]", v, -10.0, 10.0)


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
