"""Megatron-style tensor-parallel shard of a Transformer: rank r of n holds heads / n and intermediate / n.

Column-parallel (output rows split): q/k/v (and their biases), gate/up. Row-parallel (input columns split):
o_proj and down_proj, whose partial outputs are summed across ranks by an all_reduce. Embedding, norms and
lm_head are replicated (every rank can compute full logits; only rank 0 does). Each rank's KV cache holds
its own KV heads: build it from ``shard_config``. Rank r's q heads [r H/n, (r+1) H/n) read exactly its KV
heads [r KVH/n, (r+1) KVH/n), so attention needs no communication.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from saguaro_exec.model.config import ModelConfig
from saguaro_exec.model.errors import ConfigError
from saguaro_exec.model.transformer import Transformer

COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROW = ("o_proj", "down_proj")


def tp_divisibility(config: ModelConfig, world: int) -> str | None:
    """Why ``config`` cannot be split over ``world`` ranks (None when it can)."""
    for name in ("num_heads", "num_kv_heads", "intermediate_size"):
        value = getattr(config, name)
        if value % world:
            return f"{name} = {value} is not divisible by {world}"
    return None


def shard_config(config: ModelConfig, world: int) -> ModelConfig:
    """The per-rank shape: heads, KV heads and intermediate size divided by ``world``."""
    why = tp_divisibility(config, world)
    if why is not None:
        raise ConfigError("target_devices", f"cannot split the target over {world} ranks: {why}",
                          "a number of devices dividing num_heads, num_kv_heads and intermediate_size")
    return replace(config, num_heads=config.num_heads // world, num_kv_heads=config.num_kv_heads // world,
                   intermediate_size=config.intermediate_size // world, head_dim=config.head_dim)


def shard_slice(name: str, shape: tuple[int, ...], rank: int, world: int) -> tuple[int, slice] | None:
    """(dim, slice) of the full tensor ``name`` that rank ``rank`` holds; None when replicated."""
    parts = name.split(".")
    if len(parts) < 2 or parts[-2] not in COLUMN + ROW:
        return None
    dim = 0 if parts[-2] in COLUMN else 1
    if parts[-1] == "bias" and parts[-2] in ROW:
        return None                                  # a row-parallel bias is added once, after the sum
    size = shape[dim] // world
    return dim, slice(rank * size, (rank + 1) * size)


def take_shard(name: str, full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s part of the full tensor ``name``."""
    cut = shard_slice(name, tuple(full.shape), rank, world)
    if cut is None:
        return full
    dim, s = cut
    return full[s] if dim == 0 else full[:, s]


class RowParallelLinear(nn.Module):
    """A row-parallel Linear: local matmul on this rank's input columns, then a sum over the group."""

    def __init__(self, linear: nn.Linear, group) -> None:
        super().__init__()
        self.linear, self.group = linear, group
        self.bias = linear.bias
        linear.bias = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        self.group.allreduce([y]).wait()
        return y if self.bias is None else y + self.bias


def _wrap_row_parallel(model: Transformer, group) -> None:
    for layer in model.model.layers:
        layer.self_attn.o_proj = RowParallelLinear(layer.self_attn.o_proj, group)
        layer.mlp.down_proj = RowParallelLinear(layer.mlp.down_proj, group)


def _full_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        full = Transformer(config)
    shapes = {n: tuple(p.shape) for n, p in full.named_parameters(remove_duplicate=False)}
    if config.tie_word_embeddings:
        shapes.pop("lm_head.weight", None)
    return shapes


def _read_shards(path: Path, shapes: dict[str, tuple[int, ...]], rank: int, world: int) -> dict[str, torch.Tensor]:
    """Read only this rank's slice of each tensor from the safetensors files."""
    from safetensors import safe_open

    from saguaro_exec.model.loading import _shard_map, check_tensor_names, read_config

    files = _shard_map(path)
    check_tensor_names(shapes, files, read_config(path), path)    # missing and unused tensors, named
    out: dict[str, torch.Tensor] = {}
    for name, shape in shapes.items():
        with safe_open(str(files[name]), framework="pt") as f:
            sl = f.get_slice(name)
            got = tuple(sl.get_shape())
            if got != shape:
                raise ConfigError(f"checkpoint tensor {name}", f"shape {got} in {str(path)!r} does not match "
                                  "config.json", str(shape))
            cut = shard_slice(name, shape, rank, world)
            out[name] = sl[:] if cut is None else sl[cut[1]] if cut[0] == 0 else sl[:, cut[1]]
    return out


def load_tp_shard(source: object, rank: int, world: int, group, device: str, dtype: torch.dtype) -> Transformer:
    """Rank ``rank``'s shard of ``source`` (checkpoint directory or in-memory Transformer) on ``device``;
    its o_proj / down_proj sum over ``group`` (None: no communication, for tests of one shard)."""
    if isinstance(source, str | os.PathLike):
        from saguaro_exec.model.loading import read_config

        config = read_config(source)
        full = _read_shards(Path(source), _full_shapes(config), rank, world)
    else:
        config = source.config
        full = {n: take_shard(n, t.detach(), rank, world) for n, t in source.state_dict().items()}
    with torch.device("meta"):
        model = Transformer(shard_config(config, world))
    model.load_state_dict({n: t.to(device=device, dtype=dtype).contiguous() for n, t in full.items()},
                          strict=False, assign=True)
    model.tie_weights()
    if group is not None:
        _wrap_row_parallel(model, group)
    model.full_config = config
    return model.eval()
