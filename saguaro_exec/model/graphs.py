"""One model's CUDA-graph pool: KV caches at bucketed (batch, capacity) shapes, forwards captured lazily per
(cache, new tokens T, attended-slot bucket S), and the padding that maps a step onto those shapes.

A step of ``b`` rows runs on a cache of ``bucket_batch(b)`` rows: the pad rows hold token 0 at positions and
slots 0..T-1 of their own cache rows and see only those slots, so they never touch a real row. The attended
slots are rounded up to a multiple of ``SLOT_BUCKET`` (extra columns masked), so a run needs a handful of
graphs. Caches are leased exclusively and come back when their user is garbage collected, so the next batch
of prompts reuses the cache and its captured graphs. ``capture=False`` runs the same static-buffer forwards
eagerly (any device): that is how the CPU tests check the padding and bucketing.
"""

from __future__ import annotations

import torch

from saguaro_exec.model.cuda_graph import GraphedForward
from saguaro_exec.model.kv_cache import KVCache
from saguaro_exec.model.masks import causal_mask

SLOT_BUCKET = 256          # attended slots and cache capacities are rounded up to multiples of this
MAX_GRAPH_TOKENS = 128     # steps with more new tokens per row (prefills) run eagerly


def bucket_batch(batch: int) -> int:
    """Rows of the cache a batch of ``batch`` sequences runs on: the next power of two."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    return 1 << (batch - 1).bit_length()


def bucket_capacity(capacity: int, step: int = SLOT_BUCKET) -> int:
    """Cache capacity rounded up to a multiple of ``step``."""
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    return -(-capacity // step) * step


def bucket_slots(slots: int, capacity: int, step: int = SLOT_BUCKET) -> int:
    """Attended slots S rounded up to a multiple of ``step``, at most the cache ``capacity``."""
    if not 0 < slots <= capacity:
        raise ValueError(f"slots={slots} must be in [1, capacity {capacity}]")
    return min(capacity, -(-slots // step) * step)


def pad_step(tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor | None,
             seqlens: torch.Tensor | None, batch: int) -> tuple:
    """A step's inputs (tokens/positions/slots [b, T], mask [b, T, S] or None, seqlens [b] or None) padded
    to ``batch`` rows: pad row queries t see slots 0..t of their own row, where they write."""
    b, t = tokens.shape
    if b == batch:
        return tokens, positions, slots, mask, seqlens
    if b > batch:
        raise ValueError(f"step has {b} rows, the cache {batch}")
    n, dev = batch - b, tokens.device
    own = torch.arange(t, device=dev, dtype=torch.long).expand(n, t)
    tokens = torch.cat([tokens, torch.zeros(n, t, dtype=tokens.dtype, device=dev)])
    positions = torch.cat([positions, own.to(positions.dtype)])
    slots = torch.cat([slots, own.to(slots.dtype)])
    if mask is not None:
        mask = torch.cat([mask, causal_mask(torch.zeros(n, dtype=torch.long, device=dev), t, mask.shape[-1])])
    if seqlens is not None:
        seqlens = torch.cat([seqlens, torch.full((n,), t, dtype=seqlens.dtype, device=dev)])
    return tokens, positions, slots, mask, seqlens


class GraphPool:
    """Static caches and captured forwards of one model in this process (see the module docstring)."""

    def __init__(self, model, capture: bool | None = None) -> None:
        self.model = model
        self.capture = model.device.type == "cuda" if capture is None else capture
        self.mempool = torch.cuda.graph_pool_handle() if self.capture else None   # shared by its graphs
        self._free: dict[tuple[int, int], list[KVCache]] = {}
        self._graphs: dict[tuple[int, int, int, bool], GraphedForward] = {}

    @property
    def captures(self) -> int:
        """Forwards captured so far (static-buffer forwards when ``capture`` is False)."""
        return len(self._graphs)

    def lease(self, batch: int, capacity: int) -> KVCache:
        """A cache of bucket_batch(batch) rows and bucket_capacity(capacity) slots, for one user at a time."""
        key = (bucket_batch(batch), bucket_capacity(capacity))
        free = self._free.get(key)
        return free.pop() if free else self.model.new_cache(*key)

    def release(self, cache: KVCache) -> None:
        """Give a leased cache back (its graphs stay captured for the next lease)."""
        self._free.setdefault((cache.batch, cache.capacity), []).append(cache)

    def forward(self, cache: KVCache, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                mask: torch.Tensor | None, seqlens: torch.Tensor | None) -> torch.Tensor:
        """Replay (capturing on first use) the forward for this step's shape; inputs already have
        ``cache.batch`` rows and are on the device. Returns the graph's static logits [B, T, V]: copy
        what you keep before the next call."""
        flash = seqlens is not None
        s = cache.capacity if flash else bucket_slots(mask.shape[-1], cache.capacity)
        key = (id(cache), tokens.shape[1], s, flash)
        g = self._graphs.get(key)
        if g is None:
            g = self._graphs[key] = GraphedForward(self.model, cache, tokens.shape[1], s, flash=flash,
                                                   capture=self.capture, pool=self.mempool)
        return g(tokens, positions, slots, mask, seqlens)
