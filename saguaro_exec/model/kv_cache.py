"""Static KV cache: preallocated K/V for every layer, addressed by slot."""

from __future__ import annotations

import torch

from saguaro_exec.model.config import ModelConfig


class KVCache:
    """k, v: [num_layers, batch, num_kv_heads, capacity, head_dim].

    A slot is a column of the cache; which slots hold which logical positions is the caller's
    business (positions drive RoPE, slots drive storage, the mask drives visibility).
    """

    def __init__(self, config: ModelConfig, batch: int, capacity: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        if batch <= 0 or capacity <= 0:
            raise ValueError(f"KVCache batch and capacity must be positive, got batch={batch}, capacity={capacity}")
        shape = (config.num_layers, batch, config.num_kv_heads, capacity, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.batch, self.capacity = batch, capacity

    @property
    def device(self) -> torch.device:
        return self.k.device

    @property
    def dtype(self) -> torch.dtype:
        return self.k.dtype

    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v [B, KVH, T, D] of one layer at slots [B, T] (per batch row)."""
        b, h, t, d = k.shape
        index = slots.to(self.k.device).view(b, 1, t, 1).expand(b, h, t, d)
        self.k[layer].scatter_(2, index, k.to(self.k.dtype))
        self.v[layer].scatter_(2, index, v.to(self.v.dtype))

    def layers(self) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """Per-layer K and V [B, KVH, capacity, D] views, made once (the lean forward writes through them)."""
        got = self.__dict__.get("_layers")
        if got is None:
            got = self.__dict__["_layers"] = (self.k.unbind(0), self.v.unbind(0))
        return got

    def seen(self, num_slots: int) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """Per-layer K and V views of slots [0, num_slots), made once per ``num_slots`` (at most capacity
        entries): the lean forward attends through them, so a step pays no slicing."""
        got = self.__dict__.get("_seen")
        if got is None:
            got = self.__dict__["_seen"] = {}
        views = got.get(num_slots)
        if views is None:
            views = got[num_slots] = (self.k[:, :, :, :num_slots].unbind(0), self.v[:, :, :, :num_slots].unbind(0))
        return views

    def view(self, layer: int, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of slots [0, num_slots) of one layer: [B, KVH, num_slots, D] views."""
        return self.k[layer, :, :, :num_slots], self.v[layer, :, :, :num_slots]

    def copy_slots(self, batch_idx: int, src_slots, dst_slots) -> None:
        """Copy K/V of src_slots to dst_slots in one batch row, all layers (e.g. to make an accepted
        tree branch contiguous after the prefix). Overlapping ranges are safe (gather, then scatter)."""
        src = torch.as_tensor(src_slots, dtype=torch.long, device=self.k.device).reshape(-1)
        dst = torch.as_tensor(dst_slots, dtype=torch.long, device=self.k.device).reshape(-1)
        if src.shape != dst.shape:
            raise ValueError(f"copy_slots: {src.numel()} source slots but {dst.numel()} destination slots")
        if src.numel() == 0:
            return
        for cache in (self.k, self.v):
            cache[:, batch_idx, :, dst] = cache[:, batch_idx, :, src].clone()

    def copy_slots_batched(self, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
        """Per-row copy: src_slots, dst_slots are [B, N] (row b copies src[b] -> dst[b]), all layers."""
        src = src_slots.to(self.k.device, torch.long)
        dst = dst_slots.to(self.k.device, torch.long)
        n_layers, b, h, _, d = self.k.shape
        n = src.shape[1]
        if src.shape != (b, n) or dst.shape != (b, n):
            raise ValueError(f"copy_slots_batched: expected [{b}, N] slot tensors, got {tuple(src.shape)}, {tuple(dst.shape)}")
        gi = src.view(1, b, 1, n, 1).expand(n_layers, b, h, n, d)
        si = dst.view(1, b, 1, n, 1).expand(n_layers, b, h, n, d)
        for cache in (self.k, self.v):
            cache.scatter_(3, si, cache.gather(3, gi))

    def rows(self, start: int, n: int) -> KVCache:
        """Rows [start, start + n) as a KVCache sharing this one's storage (writes land here)."""
        view = object.__new__(KVCache)
        view.k, view.v = self.k[:, start:start + n], self.v[:, start:start + n]
        view.batch, view.capacity = n, self.capacity
        return view

    def copy_row(self, src: int, dst: int) -> None:
        """Row ``dst`` takes row ``src``'s K/V, all layers and slots (compacting a batch's live rows)."""
        for cache in (self.k, self.v):
            cache[:, dst] = cache[:, src]

    def reset(self) -> None:
        self.k.zero_()
        self.v.zero_()
