"""Rotary position embeddings (HF "rotate_half" layout), with Llama-3.1 ("llama3") and linear scaling."""

from __future__ import annotations

import math

import torch

from saguaro_exec.model.config import ModelConfig

_TABLE_MAX = 1 << 21      # elements of a cos/sin table over every position ([P, heads, D]: 8 MiB each)


def inv_freq(config: ModelConfig) -> torch.Tensor:
    """Per-pair inverse frequencies [head_dim/2], float32 on CPU, scaling applied."""
    d = config.head_dim
    freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device="cpu").float() / d))
    kind, rs = config.rope_type, config.rope_scaling or {}
    if kind == "linear":
        return freq / float(rs["factor"])
    if kind == "llama3":
        factor = float(rs["factor"])
        low, high = float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        old_len = float(rs["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / freq
        scaled = torch.where(wavelen > low_wavelen, freq / factor, freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(medium, smoothed, scaled)
    return freq


class Rotary:
    """cos/sin tables computed on the fly from positions; inv_freq kept in float32 (not a module buffer,
    so model.to(bfloat16) cannot round it)."""

    def __init__(self, config: ModelConfig) -> None:
        self._inv_freq = inv_freq(config)
        self.max_positions = config.max_position_embeddings
        self._per_device: dict = {}            # device (and heads): inv_freq there

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [B, T] -> cos, sin [B, 1, T, head_dim] in dtype."""
        dev = positions.device
        f = self._per_device.get(dev)
        if f is None:
            f = self._per_device[dev] = self._inv_freq.to(dev)
        angles = positions.to(torch.float32).unsqueeze(-1) * f  # [B, T, D/2]
        emb = torch.cat((angles, angles), dim=-1).unsqueeze(1)
        half = angles.shape[-1]
        sin = emb.sin()
        sin[..., :half].neg_()              # signed sin: apply_rope needs one roll instead of rotate_half
        return emb.cos().to(dtype), sin.to(dtype)

    def cos_sin_heads(self, positions: torch.Tensor, dtype: torch.dtype, rotated: int, kept: int, bound: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [B, T] (all < ``bound``) -> cos, sin [B, T, rotated + kept, head_dim]: ``cos_sin``'s
        values for the first ``rotated`` heads (the same float operations), angle 0 (cos 1, sin 0) for the
        ``kept`` ones, so one RoPE over q, k and v together leaves v as it is (the lean forward's single RoPE
        per layer). On the CPU, read from a table over positions [0, bound) when that is small (tiny
        models: 2 torch calls instead of 12); not on a GPU, where CUDA graphs would keep reading a table
        that a longer bound replaced."""
        dev = positions.device
        key = (dev, dtype, rotated, kept)
        got = self._per_device.get(key)
        if got is None or (got[2] is not None and got[2][0].shape[0] < bound):
            base = self._inv_freq.to(dev)
            f = torch.stack([base, torch.zeros_like(base)])           # rotated heads' and kept heads' rows
            heads = torch.tensor([0] * rotated + [1] * kept, device=dev)
            table, n = None, max(bound, self.max_positions)
            if dev.type == "cpu" and n * (rotated + kept) * 2 * f.shape[1] <= _TABLE_MAX:
                table = tuple(t[0].index_select(1, heads)
                              for t in self._cos_sin_2(torch.arange(n, device=dev).view(1, -1), f, dtype))
            got = self._per_device[key] = (f, heads, table)             # table: cos, sin [P, heads, D]
        f, heads, table = got
        if table is not None:
            return table[0][positions], table[1][positions]
        cos, sin = self._cos_sin_2(positions, f, dtype)
        return cos.index_select(2, heads), sin.index_select(2, heads)

    @staticmethod
    def _cos_sin_2(positions: torch.Tensor, f: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, signed sin [B, T, 2, D] of positions [B, T] at the frequency rows f [2, D/2]."""
        b, t = positions.shape
        angles = positions.to(torch.float32).view(b, t, 1, 1) * f     # [B, T, 2, D/2]
        emb = torch.cat((angles, angles), dim=-1)
        sin = emb.sin()
        sin[..., :angles.shape[-1]].neg_()
        return emb.cos().to(dtype), sin.to(dtype)

def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, with ``sin`` from ``Rotary.cos_sin`` (its first half negated):
    rotate_half(x) * sin == roll(x, D/2) * signed sin, four ops instead of seven per call."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin
